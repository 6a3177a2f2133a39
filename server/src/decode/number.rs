//! Text to numbers as TensorFlow's `strings::safe_strto32/64/f/d` parse them. In the
//! TensorFlow the golden vectors come from (2.21) these are absl's `SimpleAtoi` and
//! `SimpleAtof`/`SimpleAtod` (older releases used double-conversion and took no `+`
//! before an integer nor `Infinity`).
//!
//! - Integers: ASCII whitespace around the number (space, `\t \n \v \f \r`), one optional
//!   `+` or `-`, then base-10 digits only (leading zeros fine, no `0x`, no `.`); overflow
//!   is an error.
//! - Floats: the same whitespace, one optional `+` (not followed by `-`), then
//!   `absl::from_chars`: an optional `-`, then a decimal number (`1`, `1.`, `.5`, `1e-3`),
//!   `inf`/`infinity`/`nan`/`nan(chars)` in any case, or a hex float `0x1.8p3` (exponent
//!   optional). Decimal and hex are rounded correctly, straight to the target type (a
//!   float32 is never rounded through a float64); overflow gives ±inf, underflow ±0 or a
//!   denormal.

/// `absl::ascii_isspace`.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn trim(mut text: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = text
        && is_space(*first)
    {
        text = rest;
    }
    while let [rest @ .., last] = text
        && is_space(*last)
    {
        text = rest;
    }
    text
}

/// `absl::SimpleAtoi` into an `int64`.
pub fn parse_i64(text: &[u8]) -> Option<i64> {
    let text = trim(text);
    let (negative, digits) = match text {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() {
        return None;
    }
    let mut magnitude: u64 = 0;
    // Up to 19 digits cannot overflow a u64: check for overflow only past them.
    let (short, long) = digits.split_at(digits.len().min(19));
    for &b in short {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        magnitude = magnitude * 10 + u64::from(digit);
    }
    for &b in long {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(digit))?;
    }
    if negative { 0i64.checked_sub_unsigned(magnitude) } else { i64::try_from(magnitude).ok() }
}

/// `absl::SimpleAtoi` into an `int32`.
pub fn parse_i32(text: &[u8]) -> Option<i32> {
    parse_i64(text).and_then(|value| i32::try_from(value).ok())
}

/// `absl::SimpleAtof`.
pub fn parse_f32(text: &[u8]) -> Option<f32> {
    parse_float(text)
}

/// `absl::SimpleAtod`.
pub fn parse_f64(text: &[u8]) -> Option<f64> {
    parse_float(text)
}

/// What the two float widths share for parsing.
trait Float: Copy + std::str::FromStr + std::ops::Neg<Output = Self> {
    /// Largest whole number up to which every integer is exact (2^24, 2^53).
    const EXACT_INTEGERS: u64;
    /// Powers of ten that are exact: 10^0 ..= 10^10 for f32, 10^22 for f64.
    const EXACT_POWERS_OF_TEN: u32;
    /// `mantissa / 10^fraction_digits`, both exact (checked by the caller): one IEEE
    /// division, so correctly rounded.
    fn exact_quotient(mantissa: u64, fraction_digits: u32) -> Self;
    /// Stored significand bits (23, 52).
    const FRACTION_BITS: u32;
    /// Exponent of the smallest denormal (-149, -1074).
    const MIN_ULP_EXPONENT: i64;
    /// Exponent of the largest finite value's leading bit (127, 1023).
    const MAX_EXPONENT: i64;
    const INFINITY_BITS: u64;
    const QUIET_NAN_BITS: u64;
    fn from_bits(bits: u64) -> Self;
}

impl Float for f32 {
    const EXACT_INTEGERS: u64 = 1 << 24;
    const EXACT_POWERS_OF_TEN: u32 = 10;
    fn exact_quotient(mantissa: u64, fraction_digits: u32) -> Self {
        const POWERS: [f32; 11] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10];
        mantissa as f32 / POWERS[fraction_digits as usize]
    }
    const FRACTION_BITS: u32 = 23;
    const MIN_ULP_EXPONENT: i64 = -149;
    const MAX_EXPONENT: i64 = 127;
    const INFINITY_BITS: u64 = 0x7f80_0000;
    const QUIET_NAN_BITS: u64 = 0x7fc0_0000;
    fn from_bits(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
}

impl Float for f64 {
    const EXACT_INTEGERS: u64 = 1 << 53;
    const EXACT_POWERS_OF_TEN: u32 = 22;
    fn exact_quotient(mantissa: u64, fraction_digits: u32) -> Self {
        const POWERS: [f64; 23] = [
            1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18,
            1e19, 1e20, 1e21, 1e22,
        ];
        mantissa as f64 / POWERS[fraction_digits as usize]
    }
    const FRACTION_BITS: u32 = 52;
    const MIN_ULP_EXPONENT: i64 = -1074;
    const MAX_EXPONENT: i64 = 1023;
    const INFINITY_BITS: u64 = 0x7ff0_0000_0000_0000;
    const QUIET_NAN_BITS: u64 = 0x7ff8_0000_0000_0000;
    fn from_bits(bits: u64) -> Self {
        f64::from_bits(bits)
    }
}

fn parse_float<F: Float>(text: &[u8]) -> Option<F> {
    let mut text = trim(text);
    // SimpleAtof takes one `+` (but not `+-`); from_chars takes one `-`.
    if let [b'+', rest @ ..] = text {
        text = rest;
        if rest.first() == Some(&b'-') {
            return None;
        }
    }
    let (negative, body) = match text {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, text),
    };
    let magnitude = match body {
        [b'+' | b'-', ..] | [] => return None,
        [b'0', b'x' | b'X', hex @ ..] => parse_hex(hex)?,
        [b'n' | b'N', b'a' | b'A', b'n' | b'N', rest @ ..] => parse_nan_tail(rest)?,
        _ => match short_decimal(body) {
            Some(value) => value,
            // Rust's grammar is from_chars' decimal grammar plus `inf`/`infinity`, both
            // case-insensitive, and its rounding is correct: the same values.
            None => std::str::from_utf8(body).ok()?.parse::<F>().ok()?,
        },
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// The common case of a CSV float, `digits[.digits]` with few enough digits that the
/// digits as a whole number and the power of ten are both exact in `F` (Clinger's fast
/// path): one division rounds it correctly, as the full parser would. `None`: not that
/// form, for the full parser.
fn short_decimal<F: Float>(body: &[u8]) -> Option<F> {
    match decimal_prefix(body, None)? {
        (value, len) if len == body.len() => Some(value),
        _ => None,
    }
}

/// [`short_decimal`] on the start of `input`, up to the first `stop` byte (or the end):
/// the value and the bytes it took. `None`: not that form.
fn decimal_prefix<F: Float>(input: &[u8], stop: Option<u8>) -> Option<(F, usize)> {
    let (mut mantissa, mut fraction_digits, mut digits, mut point) = (0u64, 0u32, 0u32, false);
    let mut len = 0;
    for &b in input {
        match b {
            b'0'..=b'9' => {
                mantissa = mantissa * 10 + u64::from(b - b'0');
                digits += 1;
                fraction_digits += u32::from(point);
                // 19 digits cannot overflow u64; the bounds below are far smaller.
                if digits > 18 {
                    return None;
                }
            }
            b'.' if !point => point = true,
            _ if Some(b) == stop => break,
            _ => return None,
        }
        len += 1;
    }
    (digits > 0 && mantissa <= F::EXACT_INTEGERS && fraction_digits <= F::EXACT_POWERS_OF_TEN)
        .then(|| (F::exact_quotient(mantissa, fraction_digits), len))
}

/// The plain form of a CSV number field at the start of `input`, read up to `delim` (or
/// the end): `-?digits[.digits]` for floats, `-?digits` (at most 18) for integers. The
/// value and the bytes it took, which are what [`parse_f32`], [`parse_f64`],
/// [`parse_i64`] give for them; `None`: another form (whitespace, `+`, exponents, long
/// integers...), for those parsers.
pub fn plain_f32(input: &[u8], delim: u8) -> Option<(f32, usize)> {
    signed_prefix(input, |body| decimal_prefix::<f32>(body, Some(delim)).or_else(|| long_decimal(body, delim)))
}

/// See [`plain_f32`].
pub fn plain_f64(input: &[u8], delim: u8) -> Option<(f64, usize)> {
    signed_prefix(input, |body| decimal_prefix::<f64>(body, Some(delim)).or_else(|| long_decimal(body, delim)))
}

/// `digits[.digits]` up to `stop` (or the end) with too many digits for
/// [`decimal_prefix`]'s one division: read by Rust's correctly rounded parser, as
/// [`parse_float`] reads it after its own fast path fails.
fn long_decimal<F: Float>(input: &[u8], stop: u8) -> Option<(F, usize)> {
    let len = input.iter().position(|&b| b == stop).unwrap_or(input.len());
    let text = &input[..len];
    let (mut digits, mut point) = (0, false);
    for &b in text {
        match b {
            b'0'..=b'9' => digits += 1,
            b'.' if !point => point = true,
            _ => return None,
        }
    }
    let value = (digits > 0).then(|| std::str::from_utf8(text).ok()?.parse::<F>().ok()).flatten()?;
    Some((value, len))
}

/// See [`plain_f32`].
pub fn plain_i64(input: &[u8], delim: u8) -> Option<(i64, usize)> {
    signed_prefix(input, |body| {
        let (mut value, mut digits) = (0i64, 0);
        for &b in body {
            if b == delim {
                break;
            }
            let digit = b.wrapping_sub(b'0');
            // 18 digits cannot overflow an i64.
            if digit > 9 || digits == 18 {
                return None;
            }
            value = value * 10 + i64::from(digit);
            digits += 1;
        }
        (digits > 0).then_some((value, digits))
    })
}

/// An optional `-`, then `body`'s number, negated when signed.
#[inline]
fn signed_prefix<T: std::ops::Neg<Output = T>>(
    input: &[u8],
    body: impl FnOnce(&[u8]) -> Option<(T, usize)>,
) -> Option<(T, usize)> {
    match input {
        [b'-', rest @ ..] => body(rest).map(|(value, len)| (-value, len + 1)),
        _ => body(input),
    }
}

/// After `nan`: nothing, or `(` `[A-Za-z0-9_]*` `)`. The sequence sets the payload as
/// glibc's `nan()` does (absl calls it): a whole number in C's base 0 (decimal, `0x`
/// hex, `0` octal) goes into the fraction bits below the quiet bit.
fn parse_nan_tail<F: Float>(rest: &[u8]) -> Option<F> {
    let sequence = match rest {
        [] => return Some(F::from_bits(F::QUIET_NAN_BITS)),
        [b'(', inner @ .., b')'] if inner.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_') => inner,
        _ => return None,
    };
    // absl copies at most 127 characters of the sequence.
    let sequence = &sequence[..sequence.len().min(127)];
    let payload_mask = (1u64 << (F::FRACTION_BITS - 1)) - 1;
    let payload = c_strtoull_base0(sequence).unwrap_or(0) & payload_mask;
    Some(F::from_bits(F::QUIET_NAN_BITS | payload))
}

/// `strtoull(s, &end, 0)` when it consumes all of `s` (saturating on overflow, as C
/// does); `None` when it stops early. An empty `s` is `Some(0)`.
fn c_strtoull_base0(s: &[u8]) -> Option<u64> {
    let (radix, digits) = match s {
        [b'0', b'x' | b'X', rest @ ..] if rest.first().is_some_and(u8::is_ascii_hexdigit) => (16, rest),
        [b'0', rest @ ..] => (8, rest),
        _ => (10, s),
    };
    let mut value: u64 = 0;
    let mut overflow = false;
    for &b in digits {
        let digit = u64::from((b as char).to_digit(radix)?);
        match value.checked_mul(u64::from(radix)).and_then(|v| v.checked_add(digit)) {
            Some(v) => value = v,
            None => overflow = true,
        }
    }
    Some(if overflow { u64::MAX } else { value })
}

/// A hex float after its `0x`, as absl's `ParseFloat<16>`: at most 15 significant hex
/// digits are kept and any nonzero digit dropped sets the lowest bit (sticky), which
/// keeps the rounding correct; the exponent after `p` is decimal and optional.
fn parse_hex<F: Float>(s: &[u8]) -> Option<F> {
    const MAX_DIGITS: i64 = 15;
    let hex_digit = |b: u8| (b as char).to_digit(16).map(u64::from);
    let mut i = 0;
    while s.get(i) == Some(&b'0') {
        i += 1;
    }
    let mut mantissa = 0u64;
    let mut inexact = false;
    let mut taken = 0i64;
    let mut adjustment = 0i64; // in hex digits
    let mut push = |digit: u64, mantissa: &mut u64, taken: &mut i64| {
        if *taken < MAX_DIGITS {
            *mantissa = *mantissa * 16 + digit;
            *taken += 1;
            true
        } else {
            inexact |= digit != 0;
            false
        }
    };
    while let Some(digit) = s.get(i).copied().and_then(hex_digit) {
        if !push(digit, &mut mantissa, &mut taken) {
            adjustment += 1;
        }
        i += 1;
    }
    let mut bare_point = false;
    if s.get(i) == Some(&b'.') {
        bare_point = i == 0;
        i += 1;
        if mantissa == 0 {
            while s.get(i) == Some(&b'0') {
                i += 1;
                adjustment -= 1;
                bare_point = false;
            }
        }
        while let Some(digit) = s.get(i).copied().and_then(hex_digit) {
            if push(digit, &mut mantissa, &mut taken) {
                adjustment -= 1;
            }
            bare_point = false;
            i += 1;
        }
    }
    if i == 0 || bare_point {
        return None; // no mantissa at all
    }
    if inexact {
        mantissa |= 1;
    }
    let mut exponent = 0i64;
    if let Some(b'p' | b'P') = s.get(i) {
        let mut j = i + 1;
        let negative = s.get(j) == Some(&b'-');
        if matches!(s.get(j), Some(b'-' | b'+')) {
            j += 1;
        }
        let digits_start = j;
        while s.get(j) == Some(&b'0') {
            j += 1;
        }
        let mut value = 0i64;
        let mut count = 0;
        while let Some(&b) = s.get(j).filter(|b| b.is_ascii_digit()) {
            if count < 9 {
                value = value * 10 + i64::from(b - b'0');
            }
            count += 1;
            j += 1;
        }
        if j > digits_start {
            exponent = if negative { -value } else { value };
            i = j;
        }
    }
    if i != s.len() {
        return None;
    }
    Some(from_binary(mantissa, exponent + 4 * adjustment))
}

/// `mantissa * 2^exponent`, rounded to nearest, ties to even; ±inf past the largest
/// finite value, 0 or a denormal below the smallest normal.
fn from_binary<F: Float>(mantissa: u64, exponent: i64) -> F {
    if mantissa == 0 {
        return F::from_bits(0);
    }
    let precision = i64::from(F::FRACTION_BITS) + 1;
    let top = 63 - i64::from(mantissa.leading_zeros()) + exponent; // exponent of the leading bit
    if top > F::MAX_EXPONENT {
        return F::from_bits(F::INFINITY_BITS);
    }
    let ulp = (top - (precision - 1)).max(F::MIN_ULP_EXPONENT);
    let shift = ulp - exponent;
    let units = if shift <= 0 {
        mantissa << -shift // exact: fits in `precision` bits
    } else if shift > 64 {
        0 // below half of the smallest denormal
    } else {
        let kept = mantissa.checked_shr(shift as u32).unwrap_or(0);
        let rest = mantissa & (u64::MAX >> (64 - shift));
        let half = 1u64 << (shift - 1);
        if rest > half || (rest == half && kept & 1 == 1) { kept + 1 } else { kept }
    };
    // A normal's units carry its leading bit into the exponent field; a carry out of
    // the significand moves to the next binade on its own.
    let bits = (((ulp - F::MIN_ULP_EXPONENT) as u64) << F::FRACTION_BITS) + units;
    F::from_bits(bits.min(F::INFINITY_BITS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_fields_read_as_the_full_parsers_do() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let alphabet = b"0123456789012345678901234567890123456789.-+e, x";
        let mut taken = 0;
        for _ in 0..200_000 {
            let len = 1 + next(24) as usize;
            let field: Vec<u8> = (0..len).map(|_| alphabet[next(alphabet.len() as u64) as usize]).collect();
            let end = field.iter().position(|&b| b == b',').unwrap_or(field.len());
            let text = &field[..end];
            if let Some((value, len)) = plain_i64(&field, b',') {
                assert_eq!((len, Some(value)), (end, parse_i64(text)), "{:?}", String::from_utf8_lossy(&field));
                taken += 1;
            }
            // Floats of both widths, compared bit for bit: (plain bits and length, full bits).
            let floats = [
                (
                    plain_f32(&field, b',').map(|(v, len)| (u64::from(v.to_bits()), len)),
                    parse_f32(text).map(|v| u64::from(v.to_bits())),
                ),
                (plain_f64(&field, b',').map(|(v, len)| (v.to_bits(), len)), parse_f64(text).map(f64::to_bits)),
            ];
            for (plain, full) in floats {
                if let Some((bits, len)) = plain {
                    assert_eq!((len, Some(bits)), (end, full), "{:?}", String::from_utf8_lossy(text));
                    taken += 1;
                }
            }
        }
        assert!(taken > 10_000, "the plain forms were generated ({taken})");
        // Not plain: left to the full parsers.
        for field in ["", "-", "+1", " 1", "1e3", "1.2.3", "1234567890123456789", "--1", ".", "-.", "1 "] {
            assert_eq!(plain_i64(field.as_bytes(), b','), None, "{field}");
        }
        for field in ["", "-", "+1", " 1", "1e3", "1.2.3", ".", "-.", "1.-2", "1 "] {
            assert_eq!(plain_f32(field.as_bytes(), b','), None, "{field}");
        }
        // Too many digits for one exact division: read by the full parser's rule, whole.
        for field in ["16777217", "0.12345678901", "-4452.3125", "123456789012345678901234.5", "7."] {
            let plain = plain_f32(field.as_bytes(), b',').map(|(v, len)| (v.to_bits(), len));
            assert_eq!(plain, parse_f32(field.as_bytes()).map(|v| (v.to_bits(), field.len())), "{field}");
        }
        assert_eq!(plain_i64(b"-12,5", b','), Some((-12, 3)));
        assert_eq!(plain_f32(b"-0.0,", b','), Some((-0.0, 4)));
        assert!(plain_f32(b"-0.0,", b',').unwrap().0.is_sign_negative());
    }

    #[test]
    fn integers_as_simple_atoi() {
        assert_eq!(parse_i32(b" +007 "), Some(7));
        assert_eq!(parse_i32(b"\t-2147483648\x0b"), Some(i32::MIN));
        assert_eq!(parse_i32(b"2147483648"), None);
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        assert_eq!(parse_i64(b"99999999999999999999999"), None);
        for bad in [&b""[..], b" ", b"+", b"-", b"+-1", b"--1", b"1 2", b"1.5", b"0x10", b"1e3", b"\xc2\xa01"] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }

    fn f32_bits(text: &str) -> Option<u32> {
        parse_f32(text.as_bytes()).map(f32::to_bits)
    }

    fn f64_bits(text: &str) -> Option<u64> {
        parse_f64(text.as_bytes()).map(f64::to_bits)
    }

    #[test]
    fn decimal_floats_round_once_to_the_target_type() {
        // 1.00000005960464477539 is exactly halfway between two float32s: a float64
        // rounding first would land on the midpoint and then round to even.
        assert_eq!(f32_bits("1.000000059604644775390625000001"), Some(0x3f80_0001));
        assert_eq!(f32_bits("1.000000059604644775390625"), Some(0x3f80_0000));
        assert_eq!(f32_bits("3.4028236e38"), Some(0x7f80_0000));
        assert_eq!(f32_bits("-1e-50"), Some(0x8000_0000));
        assert_eq!(f32_bits(" \t1.5\r\n"), Some(1.5f32.to_bits()));
        assert_eq!(f64_bits("1e-320"), Some(1e-320f64.to_bits()));
        assert_eq!(f64_bits("+.5e1"), Some(5f64.to_bits()));
        assert_eq!(f64_bits("5."), Some(5f64.to_bits()));
        for bad in
            ["", " ", ".", "+-1", "-+1", "++1", "--1", "1e", "1e+", "e5", "1.2.3", "1,5", "0x", "0x.", "0xp1", "0xg"]
        {
            assert_eq!(f64_bits(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn short_decimals_take_the_fast_path_to_the_full_parsers_value() {
        // Every form the fast path takes, against Rust's correctly rounded parser, bit
        // for bit: digits on both sides of the point, up to and past the exact bounds.
        let mut rng = crate::pipeline::rng::SplitMix64 { state: 7 };
        let mut fast = (0, 0);
        for _ in 0..200_000 {
            let whole = rng.next_u64() % 10u64.pow((rng.next_u64() % 10) as u32);
            let fraction_digits = (rng.next_u64() % 12) as usize;
            let fraction = rng.next_u64() % 10u64.pow(fraction_digits as u32);
            let text = match fraction_digits {
                0 => format!("{whole}"),
                _ => format!("{whole}.{fraction:0fraction_digits$}"),
            };
            if let Some(value) = short_decimal::<f32>(text.as_bytes()) {
                assert_eq!(value.to_bits(), text.parse::<f32>().unwrap().to_bits(), "f32 {text}");
                fast.0 += 1;
            }
            if let Some(value) = short_decimal::<f64>(text.as_bytes()) {
                assert_eq!(value.to_bits(), text.parse::<f64>().unwrap().to_bits(), "f64 {text}");
                fast.1 += 1;
            }
            assert_eq!(f32_bits(&text), Some(text.parse::<f32>().unwrap().to_bits()), "{text}");
        }
        assert!(fast.0 > 20_000 && fast.1 > 100_000, "most inputs took the fast path: {fast:?}");
        for text in ["1.", ".5", "0", "00.250"] {
            assert_eq!(short_decimal::<f32>(text.as_bytes()), Some(text.parse::<f32>().unwrap()), "{text}");
        }
        for text in [".", "", "1e5", "1.2.3", "16777217", "0.00000000001", "inf"] {
            assert_eq!(short_decimal::<f32>(text.as_bytes()), None, "{text} is for the full parser");
        }
    }

    #[test]
    fn specials_in_any_case() {
        assert_eq!(f32_bits("InFiNiTy"), Some(f32::INFINITY.to_bits()));
        assert_eq!(f32_bits("-inf"), Some(f32::NEG_INFINITY.to_bits()));
        assert_eq!(f32_bits("+INF"), Some(f32::INFINITY.to_bits()));
        assert_eq!(f32_bits("NaN"), Some(0x7fc0_0000));
        assert_eq!(f32_bits("-nan"), Some(0xffc0_0000));
        assert_eq!(f64_bits("nan()"), Some(0x7ff8_0000_0000_0000));
        assert_eq!(f64_bits("nan(0x10)"), Some(0x7ff8_0000_0000_0010));
        assert_eq!(f64_bits("nan(12)"), Some(0x7ff8_0000_0000_000c));
        assert_eq!(f64_bits("nan(abc)"), Some(0x7ff8_0000_0000_0000));
        for bad in ["infin", "nan(", "nan(a-b)", "nanx", "0xinf", "in"] {
            assert_eq!(f64_bits(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn hex_floats() {
        assert_eq!(parse_f32(b"0x1p3"), Some(8.0));
        assert_eq!(parse_f64(b"-0X1.8P1"), Some(-3.0));
        assert_eq!(parse_f64(b"0x.8"), Some(0.5));
        assert_eq!(parse_f64(b"0x0.001p12"), Some(1.0));
        assert_eq!(parse_f64(b"0x10"), Some(16.0));
        assert_eq!(parse_f64(b"0x1p-1074"), Some(f64::from_bits(1)));
        assert_eq!(parse_f64(b"0x1p-1075"), Some(0.0)); // a tie, to even
        assert_eq!(parse_f64(b"0x1.8p-1075"), Some(f64::from_bits(1)));
        assert_eq!(parse_f64(b"0x1p1024"), Some(f64::INFINITY));
        assert_eq!(parse_f64(b"0x1.fffffffffffffp1023"), Some(f64::MAX));
        assert_eq!(parse_f32(b"0x1.fffffep127"), Some(f32::MAX));
        assert_eq!(parse_f32(b"0x1.ffffffp127"), Some(f32::INFINITY)); // rounds up past the top
        assert_eq!(parse_f32(b"0x1.000001p0"), Some(1.0)); // tie, to even
        assert_eq!(parse_f32(b"0x1.0000010000000000001p0"), Some(f32::from_bits(0x3f80_0001))); // sticky
        assert_eq!(parse_f32(b"0x1p-149"), Some(f32::from_bits(1)));
        assert_eq!(parse_f32(b"0x1p-126"), Some(f32::MIN_POSITIVE));
        assert_eq!(parse_f32(b"0x0p99"), Some(0.0));
        assert_eq!(parse_f32(b"-0x0"), Some(-0.0));
        assert_eq!(parse_f64(b"0x1p00000000000000003"), Some(8.0));
        assert_eq!(parse_f64(b"0x1p99999999999"), Some(f64::INFINITY));
    }
}
