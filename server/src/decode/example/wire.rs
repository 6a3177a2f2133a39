//! The protobuf wire format of `tf.train.Example` / `SequenceExample`, read in place.
//!
//! Field numbers (tensorflow/core/example/{example,feature}.proto):
//! `Example { Features features = 1; }`, `Features { map<string, Feature> feature = 1; }`,
//! `Feature { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
//! Int64List int64_list = 3; } }`, `XList { repeated X value = 1; }` (packed or not),
//! `SequenceExample { Features context = 1; FeatureLists feature_lists = 2; }`,
//! `FeatureLists { map<string, FeatureList> feature_list = 1; }`,
//! `FeatureList { repeated Feature feature = 1; }`.
//!
//! As protobuf parsers do: unknown fields (and known fields with an unexpected wire type)
//! are skipped, repeated messages merge, a later map entry replaces an earlier one with
//! the same key, and a later `oneof` member replaces an earlier one.

/// The bytes are not a valid protobuf message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field<'a> {
    Varint(u64),
    Fixed64(&'a [u8]),
    Len(&'a [u8]),
    Fixed32(&'a [u8]),
}

/// Iterates over the fields of one message.
pub struct Fields<'a> {
    buf: &'a [u8],
}

#[inline]
pub fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { buf }
}

#[inline]
fn varint(buf: &mut &[u8]) -> Result<u64, Malformed> {
    if let Some((&byte, rest)) = buf.split_first()
        && byte < 0x80
    {
        *buf = rest;
        return Ok(u64::from(byte));
    }
    let mut value = 0u64;
    for (i, &byte) in buf.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            *buf = &buf[i + 1..];
            return Ok(value);
        }
    }
    Err(Malformed)
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], Malformed> {
    if buf.len() < n {
        return Err(Malformed);
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Ok(head)
}

impl<'a> Fields<'a> {
    fn next_field(&mut self) -> Result<(u64, Field<'a>), Malformed> {
        let tag = varint(&mut self.buf)?;
        let number = tag >> 3;
        if number == 0 {
            return Err(Malformed);
        }
        let value = match tag & 7 {
            0 => Field::Varint(varint(&mut self.buf)?),
            1 => Field::Fixed64(take(&mut self.buf, 8)?),
            2 => {
                let len = varint(&mut self.buf)?;
                Field::Len(take(&mut self.buf, usize::try_from(len).map_err(|_| Malformed)?)?)
            }
            5 => Field::Fixed32(take(&mut self.buf, 4)?),
            _ => return Err(Malformed), // groups (3, 4) and invalid wire types
        };
        Ok((number, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Field<'a>), Malformed>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let field = self.next_field();
        if field.is_err() {
            self.buf = &[];
        }
        Some(field)
    }
}

/// A length-delimited field with a one-byte `tag` at the start of `buf`: its body and
/// the rest. The common shape of map entries and lists, read without the general loop.
#[inline]
fn leading_len_field(buf: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, mut rest) = buf.split_first()?;
    if first != tag {
        return None;
    }
    let len = usize::try_from(varint(&mut rest).ok()?).ok()?;
    (len <= rest.len()).then(|| rest.split_at(len))
}

/// The key and value of a map entry; absent fields read as empty.
#[inline]
fn entry_key_value(entry: &[u8]) -> Result<(&[u8], &[u8]), Malformed> {
    // Fast path: `key` then `value`, nothing else.
    if let Some((key, tail)) = leading_len_field(entry, 0x0a)
        && let Some((value, [])) = leading_len_field(tail, 0x12)
    {
        return Ok((key, value));
    }
    let (mut key, mut value): (&[u8], &[u8]) = (&[], &[]);
    for field in fields(entry) {
        match field? {
            (1, Field::Len(k)) => key = k,
            (2, Field::Len(v)) => value = v,
            _ => {}
        }
    }
    Ok((key, value))
}

/// Calls `visit(key, value)` for every entry of a `map<string, Message>` field numbered 1
/// of the message `map_owner` (Features or FeatureLists), in wire order.
#[inline]
pub fn for_each_entry<'a>(map_owner: &'a [u8], mut visit: impl FnMut(&'a [u8], &'a [u8])) -> Result<(), Malformed> {
    let mut rest = map_owner;
    while !rest.is_empty() {
        let entry = match leading_len_field(rest, 0x0a) {
            Some((entry, after)) => {
                rest = after;
                entry
            }
            None => {
                let mut other = fields(rest);
                let field = other.next_field()?;
                rest = other.buf;
                match field {
                    (1, Field::Len(entry)) => entry,
                    _ => continue,
                }
            }
        };
        let (key, value) = entry_key_value(entry)?;
        visit(key, value);
    }
    Ok(())
}

/// Calls `visit(features)` for every `Features` message in field `number` of `message`
/// (repeated occurrences merge, so each is visited in turn).
#[inline]
pub fn for_each_submessage<'a>(
    message: &'a [u8],
    number: u64,
    mut visit: impl FnMut(&'a [u8]) -> Result<(), Malformed>,
) -> Result<(), Malformed> {
    for field in fields(message) {
        if let (n, Field::Len(sub)) = field?
            && n == number
        {
            visit(sub)?;
        }
    }
    Ok(())
}

/// Which list a `Feature` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bytes,
    Float,
    Int64,
}

impl Kind {
    /// TensorFlow's name of the list's dtype, as in its error messages.
    pub fn dtype_name(self) -> &'static str {
        match self {
            Kind::Bytes => "string",
            Kind::Float => "float",
            Kind::Int64 => "int64",
        }
    }
}

/// The list a `Feature` holds: its kind and where its occurrences start (a later member
/// of the oneof clears the earlier ones). `None` when no list is set.
pub fn feature_kind(feature: &[u8]) -> Result<Option<(Kind, usize)>, Malformed> {
    let mut found = None;
    let mut iter = fields(feature);
    loop {
        let offset = feature.len() - iter.buf.len();
        let Some(field) = iter.next() else { return Ok(found) };
        let kind = match field? {
            (1, Field::Len(_)) => Kind::Bytes,
            (2, Field::Len(_)) => Kind::Float,
            (3, Field::Len(_)) => Kind::Int64,
            _ => continue,
        };
        if found.is_none_or(|(k, _)| k != kind) {
            found = Some((kind, offset));
        }
    }
}

fn for_each_list<'a>(
    feature: &'a [u8],
    from: usize,
    number: u64,
    mut visit: impl FnMut(&'a [u8]) -> Result<(), Malformed>,
) -> Result<(), Malformed> {
    for field in fields(&feature[from..]) {
        if let (n, Field::Len(list)) = field?
            && n == number
        {
            visit(list)?;
        }
    }
    Ok(())
}

/// The feature's list body when the feature holds exactly one list field: the common
/// case, recognised without walking the message twice.
pub fn single_list(feature: &[u8]) -> Option<(Kind, &[u8])> {
    let (&tag, mut rest) = feature.split_first()?;
    let kind = match tag {
        0x0a => Kind::Bytes,
        0x12 => Kind::Float,
        0x1a => Kind::Int64,
        _ => return None,
    };
    let len = usize::try_from(varint(&mut rest).ok()?).ok()?;
    (len == rest.len()).then_some((kind, rest))
}

/// The value of a `Feature` that is an `Int64List` of one packed value, the shape
/// TensorFlow's writers give a scalar int64 feature; `None` for any other shape (read
/// those with [`single_list`] and [`int64_list`]).
#[inline]
pub fn scalar_int64(feature: &[u8]) -> Option<i64> {
    let [0x1a, outer, 0x0a, inner, value @ ..] = feature else { return None };
    // At most 10 bytes, so both lengths are one-byte varints.
    if value.len() > 10 || usize::from(*inner) != value.len() || usize::from(*outer) != value.len() + 2 {
        return None;
    }
    let mut rest = value;
    let v = varint(&mut rest).ok()?;
    rest.is_empty().then_some(v as i64)
}

/// The value of a `Feature` that is a `FloatList` of one value, packed or not; `None`
/// for any other shape.
#[inline]
pub fn scalar_float(feature: &[u8]) -> Option<f32> {
    match feature {
        [0x12, 6, 0x0a, 4, a, b, c, d] | [0x12, 5, 0x0d, a, b, c, d] => Some(f32::from_le_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// Appends the values of an `Int64List` message body (packed or not).
pub fn int64_list(list: &[u8], out: &mut Vec<i64>) -> Result<(), Malformed> {
    if let Some((mut packed, [])) = leading_len_field(list, 0x0a) {
        while !packed.is_empty() {
            out.push(varint(&mut packed)? as i64);
        }
        return Ok(());
    }
    for field in fields(list) {
        match field? {
            (1, Field::Varint(v)) => out.push(v as i64),
            (1, Field::Len(mut packed)) => {
                while !packed.is_empty() {
                    out.push(varint(&mut packed)? as i64);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Appends the values of a `FloatList` message body (packed or not).
pub fn float_list(list: &[u8], out: &mut Vec<f32>) -> Result<(), Malformed> {
    if let Some((packed, [])) = leading_len_field(list, 0x0a) {
        if !packed.len().is_multiple_of(4) {
            return Err(Malformed);
        }
        out.extend(packed.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))));
        return Ok(());
    }
    for field in fields(list) {
        match field? {
            (1, Field::Fixed32(bytes)) => out.push(f32::from_le_bytes(bytes.try_into().expect("4 bytes"))),
            (1, Field::Len(packed)) => {
                if !packed.len().is_multiple_of(4) {
                    return Err(Malformed);
                }
                out.extend(packed.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Appends the values of a `BytesList` message body, as slices of it.
pub fn bytes_list<'a>(list: &'a [u8], out: &mut Vec<&'a [u8]>) -> Result<(), Malformed> {
    for field in fields(list) {
        if let (1, Field::Len(value)) = field? {
            out.push(value);
        }
    }
    Ok(())
}

/// Appends the values of an `Int64List` feature whose lists start at `from`.
pub fn int64_values(feature: &[u8], from: usize, out: &mut Vec<i64>) -> Result<(), Malformed> {
    for_each_list(feature, from, 3, |list| int64_list(list, out))
}

/// Appends the values of a `FloatList` feature whose lists start at `from`.
pub fn float_values(feature: &[u8], from: usize, out: &mut Vec<f32>) -> Result<(), Malformed> {
    for_each_list(feature, from, 2, |list| float_list(list, out))
}

/// Appends the values of a `BytesList` feature whose lists start at `from`.
pub fn bytes_values<'a>(feature: &'a [u8], from: usize, out: &mut Vec<&'a [u8]>) -> Result<(), Malformed> {
    for_each_list(feature, from, 1, |list| bytes_list(list, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_packed_and_unpacked_lists_and_the_last_oneof_member() {
        // Feature { int64_list { value: [1, 300] packed }, int64_list { value: 5 unpacked } }
        let feature = [0x1a, 0x04, 0x0a, 0x02, 0x01, 0x2c, 0x1a, 0x02, 0x08, 0x05];
        let (kind, from) = feature_kind(&feature).unwrap().unwrap();
        assert_eq!(kind, Kind::Int64);
        let mut out = Vec::new();
        int64_values(&feature, from, &mut out).unwrap();
        assert_eq!(out, [1, 44, 5]);
        // A float_list after an int64_list replaces it.
        let feature = [0x1a, 0x02, 0x08, 0x05, 0x12, 0x05, 0x0d, 0, 0, 0xc0, 0x3f];
        let (kind, from) = feature_kind(&feature).unwrap().unwrap();
        let mut floats = Vec::new();
        float_values(&feature, from, &mut floats).unwrap();
        assert_eq!((kind, floats), (Kind::Float, vec![1.5]));
        assert_eq!(feature_kind(&[]).unwrap(), None);
    }

    #[test]
    fn scalar_shapes_read_as_the_general_lists_do_and_others_are_left_to_them() {
        let general = |feature: &[u8]| {
            let (kind, list) = single_list(feature)?;
            let (mut ints, mut floats) = (Vec::new(), Vec::new());
            match kind {
                Kind::Int64 => int64_list(list, &mut ints).ok()?,
                Kind::Float => float_list(list, &mut floats).ok()?,
                Kind::Bytes => return None,
            }
            Some((ints, floats))
        };
        for value in [0i64, 1, 127, 128, 300, -1, i64::MAX, i64::MIN] {
            let mut body = Vec::new();
            let mut v = value as u64;
            while v >= 0x80 {
                body.push(v as u8 | 0x80);
                v >>= 7;
            }
            body.push(v as u8);
            let mut feature = vec![0x1a, body.len() as u8 + 2, 0x0a, body.len() as u8];
            feature.extend(&body);
            assert_eq!(scalar_int64(&feature), Some(value));
            assert_eq!(general(&feature), Some((vec![value], vec![])));
        }
        let packed = [0x12, 6, 0x0a, 4, 0, 0, 0xc0, 0x3f];
        let unpacked = [0x12, 5, 0x0d, 0, 0, 0xc0, 0x3f];
        for feature in [&packed[..], &unpacked] {
            assert_eq!(scalar_float(feature), Some(1.5));
            assert_eq!(general(feature), Some((vec![], vec![1.5])));
        }
        // Two values, a length that does not fit, a truncated varint, an unknown field,
        // the other kind: not the scalar shape.
        assert_eq!(scalar_int64(&[0x1a, 0x04, 0x0a, 0x02, 0x01, 0x2c]), None);
        assert_eq!(scalar_int64(&[0x1a, 0x04, 0x0a, 0x02, 0x01]), None);
        assert_eq!(scalar_int64(&[0x1a, 0x03, 0x0a, 0x01, 0x81]), None);
        assert_eq!(scalar_int64(&[0x1a, 0x04, 0x0a, 0x01, 0x05, 0x00]), None);
        assert_eq!(scalar_int64(&packed), None);
        assert_eq!(scalar_float(&[0x12, 10, 0x0a, 8, 0, 0, 0xc0, 0x3f, 0, 0, 0xc0, 0x3f]), None);
        assert_eq!(scalar_float(&[0x1a, 0x03, 0x0a, 0x01, 0x05]), None);
    }

    #[test]
    fn truncated_and_group_fields_are_malformed() {
        assert!(fields(&[0x0a, 0x05, 1]).any(|f| f.is_err()));
        assert!(fields(&[0x0b]).any(|f| f.is_err()));
        assert!(fields(&[0x08, 0xff]).any(|f| f.is_err()));
    }
}
