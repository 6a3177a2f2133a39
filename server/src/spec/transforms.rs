//! A spec's `transforms`, read: each operation's parameters checked, with TensorFlow's
//! messages where its op refuses them (`crate::transform` runs them).

use readerd_proto::v1 as pb;

use crate::decode::DType;
use crate::transform::random::BoxSampling;
use crate::transform::resize::Method;
use crate::transform::{Op, Step, Transforms};

/// A spec's list of transforms, drawing from `seed`; messages name the field
/// (`transforms[2].resize.size: ...`).
pub fn transforms_of(list: &[pb::Transform], seed: u64) -> Result<Transforms, String> {
    let steps = list.iter().enumerate().map(|(i, t)| step_of(i, t)).collect::<Result<_, _>>()?;
    Ok(Transforms::new(steps, seed))
}

/// Most pixels a transform's output may have (resizes, pads, resized crops): 4096 × 4096.
const MAX_OUTPUT_ELEMENTS: u64 = 1 << 24;

fn step_of(index: usize, transform: &pb::Transform) -> Result<Step, String> {
    use pb::transform::Op as P;
    let op = transform.op.as_ref().ok_or_else(|| format!("transforms[{index}]: no operation"))?;
    let field = |name: &str| format!("transforms[{index}].{name}");
    let step = |op: Op, feature: &str, output: &str| -> Result<Step, String> {
        if feature.is_empty() {
            return Err(format!("transforms[{index}].{}.feature is required", op.name()));
        }
        let output = if output.is_empty() { feature } else { output };
        Ok(Step { op, feature: feature.to_owned(), output: output.to_owned() })
    };
    let dtype = |dtype: i32, what: &str| -> Result<DType, String> {
        match pb::DataType::try_from(dtype).unwrap_or(pb::DataType::DtInvalid) {
            pb::DataType::DtInvalid => Err(format!("{} is required", field(what))),
            dtype => super::dtype_of(dtype, &field(what)).map_err(|e| e.to_string()),
        }
    };
    // `[height, width]` of an output, with TensorFlow's messages for another.
    let size = |dims: &[i64], what: &str| -> Result<(usize, usize), String> {
        let [h, w] = dims else {
            return Err(format!("{}: 'size' must be a 1-D Tensor of 2 elements: new_height, new_width", field(what)));
        };
        if *h <= 0 || *w <= 0 {
            return Err(format!("{}: output dimensions must be positive", field(what)));
        }
        if (*h as u64).saturating_mul(*w as u64) > MAX_OUTPUT_ELEMENTS {
            return Err(format!("{}: at most {MAX_OUTPUT_ELEMENTS} pixels, got {dims:?}", field(what)));
        }
        Ok((*h as usize, *w as usize))
    };
    match op {
        P::Slice(s) => step(Op::Slice { begin: s.begin.clone(), size: s.size.clone() }, &s.feature, &s.output),
        P::Reshape(r) => step(Op::Reshape { shape: r.shape.clone() }, &r.feature, &r.output),
        P::Transpose(t) => step(Op::Transpose { perm: t.perm.clone() }, &t.feature, &t.output),
        P::Cast(c) => {
            let to = dtype(c.dtype, "cast.dtype")?;
            if matches!(to, DType::String | DType::Complex64) {
                return Err(format!("{} must be a real number or bool dtype", field("cast.dtype")));
            }
            step(Op::Cast { dtype: to }, &c.feature, &c.output)
        }
        P::Scale(s) => step(Op::Scale { multiply: s.multiply.unwrap_or(1.0), add: s.add }, &s.feature, &s.output),
        P::Drop(d) => {
            if d.features.is_empty() {
                return Err(format!("{} names no feature", field("drop.features")));
            }
            Ok(Step { op: Op::Drop { features: d.features.clone() }, feature: String::new(), output: String::new() })
        }
        P::DecodeRaw(d) => {
            let out_type = dtype(d.out_type, "decodeRaw.outType")?;
            if out_type == DType::String {
                return Err(format!("{} must be a numeric dtype", field("decodeRaw.outType")));
            }
            step(Op::DecodeRaw { out_type, little_endian: d.little_endian.unwrap_or(true) }, &d.feature, &d.output)
        }
        P::DecodeImage(d) => {
            if !matches!(d.channels, 0 | 1 | 3 | 4) {
                return Err(format!(
                    "{}: `channels` must be 0, 1, 3 or 4 but got {}",
                    field("decodeImage"),
                    d.channels
                ));
            }
            step(Op::DecodeImage { channels: d.channels as u32 }, &d.feature, &d.output)
        }
        P::Resize(r) => {
            let (height, width) = size(&r.size, "resize.size")?;
            let method = match pb::ResizeMethod::try_from(r.method).unwrap_or(pb::ResizeMethod::Bilinear) {
                pb::ResizeMethod::Bilinear => Method::Bilinear,
                pb::ResizeMethod::Nearest => Method::Nearest,
                pb::ResizeMethod::Bicubic => Method::Bicubic,
                pb::ResizeMethod::Area => Method::Area,
            };
            step(Op::Resize { height, width, method }, &r.feature, &r.output)
        }
        P::CentralCrop(c) => {
            if !(c.fraction > 0.0 && c.fraction <= 1.0) {
                return Err(format!("{}: central_fraction must be within (0, 1]", field("centralCrop.fraction")));
            }
            step(Op::CentralCrop { fraction: c.fraction }, &c.feature, &c.output)
        }
        P::ResizeWithCropOrPad(r) => {
            for (value, name) in [(r.height, "height"), (r.width, "width")] {
                if value <= 0 {
                    return Err(format!("{}: target_{name} must be > 0.", field("resizeWithCropOrPad")));
                }
            }
            let (height, width) = size(&[r.height, r.width], "resizeWithCropOrPad")?;
            step(Op::ResizeWithCropOrPad { height, width }, &r.feature, &r.output)
        }
        P::ConvertImageDtype(c) => {
            let to = dtype(c.dtype, "convertImageDtype.dtype")?;
            if matches!(to, DType::String | DType::Complex64 | DType::Bool) {
                return Err(format!("{} must be an integer or float dtype", field("convertImageDtype.dtype")));
            }
            step(Op::ConvertImageDtype { dtype: to, saturate: c.saturate }, &c.feature, &c.output)
        }
        P::Normalize(n) => {
            if n.mean.is_empty() || n.std.is_empty() {
                return Err(format!("{} needs mean and std values", field("normalize")));
            }
            step(Op::Normalize { mean: n.mean.clone(), std: n.std.clone() }, &n.feature, &n.output)
        }
        P::PerImageStandardization(f) => step(Op::PerImageStandardization, &f.feature, &f.output),
        P::FlipLeftRight(f) => step(Op::FlipLeftRight, &f.feature, &f.output),
        P::FlipUpDown(f) => step(Op::FlipUpDown, &f.feature, &f.output),
        P::RandomFlipLeftRight(f) => step(Op::RandomFlipLeftRight, &f.feature, &f.output),
        P::RandomFlipUpDown(f) => step(Op::RandomFlipUpDown, &f.feature, &f.output),
        P::AdjustBrightness(a) => step(Op::AdjustBrightness { delta: a.delta }, &a.feature, &a.output),
        P::AdjustContrast(a) => step(Op::AdjustContrast { factor: a.factor }, &a.feature, &a.output),
        P::RandomCrop(r) => step(Op::RandomCrop { size: r.size.clone() }, &r.feature, &r.output),
        P::RandomResizedCrop(r) => {
            let (height, width) = size(&r.size, "randomResizedCrop.size")?;
            let range = |values: &[f64], default: (f32, f32), what: &str| -> Result<(f32, f32), String> {
                match values {
                    [] => Ok(default),
                    [lo, hi] if lo.is_finite() && hi.is_finite() && *lo > 0.0 && lo <= hi => {
                        Ok((*lo as f32, *hi as f32))
                    }
                    _ => Err(format!("{} must be [low, high] with 0 < low <= high, got {values:?}", field(what))),
                }
            };
            let area = range(&r.area, (0.05, 1.0), "randomResizedCrop.area")?;
            if area.1 > 1.0 {
                return Err(format!("{} must not exceed 1", field("randomResizedCrop.area")));
            }
            let sampling = BoxSampling {
                area,
                aspect_ratio: range(&r.aspect_ratio, (0.75, 1.33), "randomResizedCrop.aspectRatio")?,
                min_object_covered: r.min_object_covered.unwrap_or(0.1) as f32,
                max_attempts: if r.max_attempts <= 0 { 100 } else { r.max_attempts as u32 },
            };
            if !matches!(r.channels, 0 | 1 | 3) {
                return Err(format!("{}: channels must be 0, 1 or 3, got {}", field("randomResizedCrop"), r.channels));
            }
            let op = Op::RandomResizedCrop { height, width, sampling, channels: r.channels as u32, fast: r.fast };
            step(op, &r.feature, &r.output)
        }
        P::RandomBrightness(r) => {
            if !(r.max_delta >= 0.0 && r.max_delta.is_finite()) {
                return Err(format!("{}: max_delta must be non-negative.", field("randomBrightness")));
            }
            step(Op::RandomBrightness { max_delta: r.max_delta }, &r.feature, &r.output)
        }
        P::RandomContrast(r) => {
            // Refused as TensorFlow refuses it: NaN bounds too.
            if r.upper.partial_cmp(&r.lower) != Some(std::cmp::Ordering::Greater) {
                return Err(format!("{}: upper must be > lower.", field("randomContrast")));
            }
            if r.lower < 0.0 {
                return Err(format!("{}: lower must be non-negative.", field("randomContrast")));
            }
            step(Op::RandomContrast { lower: r.lower, upper: r.upper }, &r.feature, &r.output)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_parameters_are_refused_naming_the_field() {
        let list: Vec<pb::Transform> =
            serde_json::from_str(r#"[{"cast": {"feature": "x"}}, {"resize": {"feature": "x", "size": [0, 3]}}]"#)
                .unwrap();
        assert_eq!(transforms_of(&list[..1], 0).unwrap_err(), "transforms[0].cast.dtype is required");
        assert_eq!(
            transforms_of(&list[1..], 0).unwrap_err(),
            "transforms[0].resize.size: output dimensions must be positive"
        );
    }
}
