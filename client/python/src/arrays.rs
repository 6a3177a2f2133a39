//! An element's tensors as Python values, their bytes never copied.
//!
//! The Rust client decodes `bytes` fields as `bytes::Bytes` views of the received
//! frames, so a numeric tensor's `data` is already the payload as it arrived. It becomes
//! a numpy array over that memory: numpy's `PyArray_NewFromDescr` with the data pointer,
//! and a [`Buffer`] holding the `Bytes` as the array's base object, which keeps the frame
//! alive as long as any array over it. The arrays are read-only (the memory is shared).
//! Payloads are little-endian on the wire, as numpy's native dtypes are on the platforms
//! readerd builds for.
//!
//! Strings become [`Strings`]: the values as `Bytes` views, each handed to Python as `bytes`
//! on demand, as a zero-copy `uint8` array ([`Strings::view`]), or their lengths at once.
//! For a decoder that takes one buffer and offsets, `values` joins them into one `uint8`
//! array: one copy, made on first use with the GIL released, then kept (the wire carries
//! each value as a field of its own, so they are not adjacent in the received frames).
//!
//! Copies happen only where numpy has no equivalent: BFLOAT16 is widened to float32 (exact).

use std::sync::OnceLock;

use bytes::Bytes;
use numpy::npyffi::{self, NPY_TYPES, PY_ARRAY_API};
use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyTuple};
use readerd_proto::v1 as pb;

/// The owner of an array's memory: a received buffer (or a widened copy).
#[pyclass(frozen, module = "readerd._native")]
pub struct Buffer {
    bytes: Bytes,
}

#[pymethods]
impl Buffer {
    fn __len__(&self) -> usize {
        self.bytes.len()
    }
}

/// A STRING tensor: its values, row-major, as views of the received frames.
///
/// `len()` and indexing follow the first dimension (a 1-D tensor's items are `bytes`);
/// `view(i)` is value `i` (flat index) as a read-only `uint8` array over the received
/// bytes; `lengths` is every value's length (an int64 array shaped as the tensor);
/// `tolist()` nests `bytes` as the shape says; `numpy.asarray(strings)` is an object array
/// of `bytes`, as TensorFlow's `.numpy()` gives. `values` and `offsets` are the Arrow-style
/// layout (value `i` is `values[offsets[i]:offsets[i + 1]]`); `matrix()` is the values as
/// a `uint8` array of the tensor's shape plus one dimension, when they are all one length.
#[pyclass(frozen, module = "readerd._native")]
pub struct Strings {
    values: Vec<Bytes>,
    shape: Vec<usize>,
    joined: OnceLock<Bytes>,
}

impl Strings {
    /// Values per item of the first dimension.
    fn row_len(&self) -> usize {
        self.shape.iter().skip(1).product()
    }

    fn row(&self, i: usize) -> Strings {
        let width = self.row_len();
        Strings::new(self.values[i * width..(i + 1) * width].to_vec(), self.shape[1..].to_vec())
    }

    fn new(values: Vec<Bytes>, shape: Vec<usize>) -> Strings {
        Strings { values, shape, joined: OnceLock::new() }
    }

    /// All values in one buffer: the value itself when there is one, else one copy, kept.
    fn joined(&self, py: Python<'_>) -> Bytes {
        if let [only] = self.values.as_slice() {
            return only.clone();
        }
        // Detached around the whole lock: a second thread waiting on it must not hold the GIL.
        py.detach(|| {
            self.joined
                .get_or_init(|| {
                    let mut all = Vec::with_capacity(self.values.iter().map(Bytes::len).sum());
                    for value in &self.values {
                        all.extend_from_slice(value);
                    }
                    Bytes::from(all)
                })
                .clone()
        })
    }

    fn nested<'py>(&self, py: Python<'py>, values: &[Bytes], shape: &[usize]) -> PyResult<Bound<'py, PyAny>> {
        match shape.split_first() {
            None => Ok(PyBytes::new(py, &values[0]).into_any()),
            Some((&rows, inner)) => {
                let width: usize = inner.iter().product();
                let items = (0..rows)
                    .map(|i| self.nested(py, &values[i * width..(i + 1) * width], inner))
                    .collect::<PyResult<Vec<_>>>()?;
                Ok(PyList::new(py, items)?.into_any())
            }
        }
    }
}

#[pymethods]
impl Strings {
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    #[getter]
    fn ndim(&self) -> usize {
        self.shape.len()
    }

    #[getter]
    fn size(&self) -> usize {
        self.values.len()
    }

    /// Bytes of all the values together.
    #[getter]
    fn nbytes(&self) -> usize {
        self.values.iter().map(Bytes::len).sum()
    }

    /// The length of each value, shaped as the tensor.
    #[getter]
    fn lengths<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut data = Vec::with_capacity(self.values.len() * 8);
        for value in &self.values {
            data.extend_from_slice(&(value.len() as i64).to_le_bytes());
        }
        numeric(py, Bytes::from(data), pb::DataType::Int64, &self.shape)
    }

    /// Every value, row-major, in one read-only `uint8` array (see `offsets`).
    #[getter]
    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let joined = self.joined(py);
        let len = joined.len();
        numeric(py, joined, pb::DataType::Uint8, &[len])
    }

    /// Where each value starts in `values`, and the end of the last: int64, `size + 1` long.
    #[getter]
    fn offsets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut data = Vec::with_capacity((self.values.len() + 1) * 8);
        let mut offset = 0i64;
        data.extend_from_slice(&offset.to_le_bytes());
        for value in &self.values {
            offset += value.len() as i64;
            data.extend_from_slice(&offset.to_le_bytes());
        }
        numeric(py, Bytes::from(data), pb::DataType::Int64, &[self.values.len() + 1])
    }

    /// The values as one `uint8` array shaped `shape + (length,)`, when every value has
    /// that one length (fixed-length records, fixed-size blobs); `ValueError` otherwise.
    fn matrix<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let length = self.values.first().map_or(0, Bytes::len);
        if let Some((i, other)) = self.values.iter().enumerate().find(|(_, v)| v.len() != length) {
            return Err(PyValueError::new_err(format!(
                "the values are not one length: value 0 has {length} bytes, value {i} has {}",
                other.len()
            )));
        }
        let mut shape = self.shape.clone();
        shape.push(length);
        numeric(py, self.joined(py), pb::DataType::Uint8, &shape)
    }

    /// Pickling (DataLoader workers send their items to the main process this way): the
    /// values joined, their lengths and the shape.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let joined = self.joined(py);
        let lengths: Vec<usize> = self.values.iter().map(Bytes::len).collect();
        let restore = py.get_type::<Strings>().getattr("_from_joined")?;
        let args = (PyBytes::new(py, &joined), lengths, PyTuple::new(py, &self.shape)?);
        Ok((restore, args.into_pyobject(py)?))
    }

    /// The inverse of `__reduce__`: values of `lengths` bytes each, one after another in
    /// `joined`, shaped `shape`.
    #[staticmethod]
    fn _from_joined(joined: &[u8], lengths: Vec<usize>, shape: Vec<usize>) -> PyResult<Strings> {
        let total = lengths.iter().try_fold(0usize, |sum, &n| sum.checked_add(n));
        if total != Some(joined.len()) || shape.iter().product::<usize>() != lengths.len() {
            return Err(PyValueError::new_err(format!(
                "{} bytes in {} values do not make a string tensor of shape {shape:?}",
                joined.len(),
                lengths.len()
            )));
        }
        let all = Bytes::copy_from_slice(joined);
        let mut start = 0;
        let values = lengths
            .iter()
            .map(|&n| {
                start += n;
                all.slice(start - n..start)
            })
            .collect();
        let strings = Strings::new(values, shape);
        let _ = strings.joined.set(all);
        Ok(strings)
    }

    fn __len__(&self) -> PyResult<usize> {
        self.shape.first().copied().ok_or_else(|| PyTypeError::new_err("len() of a scalar string tensor"))
    }

    fn __getitem__<'py>(&self, py: Python<'py>, index: isize) -> PyResult<Bound<'py, PyAny>> {
        let rows = self.__len__()?;
        let i = if index < 0 { index + rows as isize } else { index };
        if i < 0 || i as usize >= rows {
            return Err(PyIndexError::new_err(format!("index {index} is out of bounds for {rows} rows")));
        }
        let i = i as usize;
        if self.shape.len() == 1 {
            Ok(PyBytes::new(py, &self.values[i]).into_any())
        } else {
            Ok(Bound::new(py, self.row(i))?.into_any())
        }
    }

    /// Value `i` (row-major flat index) as a read-only `uint8` array over the received
    /// bytes: for an image decoder that takes a buffer, without a copy.
    fn view<'py>(&self, py: Python<'py>, i: usize) -> PyResult<Bound<'py, PyAny>> {
        let value = self.values.get(i).ok_or_else(|| {
            PyIndexError::new_err(format!("index {i} is out of bounds for {} values", self.values.len()))
        })?;
        numeric(py, value.clone(), pb::DataType::Uint8, &[value.len()])
    }

    fn tolist<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.nested(py, &self.values, &self.shape)
    }

    /// An object array of `bytes` (one Python object per value: a copy of each).
    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = (dtype, copy);
        let numpy = py.import("numpy")?;
        let values = PyList::new(py, self.values.iter().map(|value| PyBytes::new(py, value)))?;
        let flat = numpy.call_method1("empty", (self.values.len(), "O"))?;
        flat.set_item(pyo3::types::PySlice::full(py), values)?;
        flat.call_method1("reshape", (PyTuple::new(py, &self.shape)?,))
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.__len__()?;
        self.tolist(py)?.try_iter().map(Bound::into_any)
    }

    fn __repr__(&self) -> String {
        let shown: Vec<String> = self.values.iter().take(3).map(|v| format!("<{} bytes>", v.len())).collect();
        let more = if self.values.len() > 3 { ", ..." } else { "" };
        format!("Strings(shape={:?}, [{}{more}])", self.shape, shown.join(", "))
    }
}

/// numpy's type number and item size for a numeric dtype.
fn numpy_type(dtype: pb::DataType) -> Option<(NPY_TYPES, usize)> {
    use pb::DataType as D;
    Some(match dtype {
        D::Int8 => (NPY_TYPES::NPY_BYTE, 1),
        D::Uint8 => (NPY_TYPES::NPY_UBYTE, 1),
        D::Bool => (NPY_TYPES::NPY_BOOL, 1),
        D::Int16 => (NPY_TYPES::NPY_SHORT, 2),
        D::Uint16 => (NPY_TYPES::NPY_USHORT, 2),
        D::Float16 => (NPY_TYPES::NPY_HALF, 2),
        D::Int32 => (NPY_TYPES::NPY_INT, 4),
        D::Float32 => (NPY_TYPES::NPY_FLOAT, 4),
        D::Int64 => (NPY_TYPES::NPY_LONGLONG, 8),
        D::Float64 => (NPY_TYPES::NPY_DOUBLE, 8),
        D::Complex64 => (NPY_TYPES::NPY_CFLOAT, 8),
        D::Bfloat16 | D::String | D::DtInvalid => return None,
    })
}

fn shape_of(tensor: &pb::DenseTensor) -> PyResult<Vec<usize>> {
    tensor
        .shape
        .iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| PyValueError::new_err(format!("negative dimension in {:?}", tensor.shape)))
        })
        .collect()
}

/// A dense tensor: a numpy array (numeric), or [`Strings`].
pub fn dense<'py>(py: Python<'py>, tensor: pb::DenseTensor) -> PyResult<Bound<'py, PyAny>> {
    let dtype = pb::DataType::try_from(tensor.dtype)
        .map_err(|_| PyValueError::new_err(format!("unknown dtype {}", tensor.dtype)))?;
    let shape = shape_of(&tensor)?;
    match dtype {
        pb::DataType::String => {
            let count: usize = shape.iter().product();
            if count != tensor.strings.len() {
                return Err(PyValueError::new_err(format!(
                    "a string tensor of shape {shape:?} with {} values",
                    tensor.strings.len()
                )));
            }
            Ok(Bound::new(py, Strings::new(tensor.strings, shape))?.into_any())
        }
        pb::DataType::Bfloat16 => {
            // The high half of a float32: widened exactly, the one copy numpy forces.
            let mut widened = Vec::with_capacity(tensor.data.len() * 2);
            for pair in tensor.data.chunks_exact(2) {
                widened.extend_from_slice(&[0, 0, pair[0], pair[1]]);
            }
            numeric(py, Bytes::from(widened), pb::DataType::Float32, &shape)
        }
        _ => numeric(py, tensor.data, dtype, &shape),
    }
}

/// A read-only numpy array of `dtype` and `shape` over `data`, which it keeps alive.
fn numeric<'py>(py: Python<'py>, data: Bytes, dtype: pb::DataType, shape: &[usize]) -> PyResult<Bound<'py, PyAny>> {
    let (typenum, item_size) =
        numpy_type(dtype).ok_or_else(|| PyValueError::new_err(format!("{dtype:?} is not a numeric dtype")))?;
    let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if count.and_then(|n| n.checked_mul(item_size)) != Some(data.len()) {
        return Err(PyValueError::new_err(format!(
            "{} bytes do not make a {dtype:?} tensor of shape {shape:?}",
            data.len()
        )));
    }
    let mut dims: Vec<npyffi::npy_intp> = shape.iter().map(|&d| d as npyffi::npy_intp).collect();
    let ndim = i32::try_from(dims.len()).map_err(|_| PyValueError::new_err("too many dimensions"))?;
    let owner = Bound::new(py, Buffer { bytes: data })?;
    let pointer = owner.get().bytes.as_ptr();
    from_owner(py, typenum, ndim, &mut dims, pointer, owner)
}

/// numpy's C API: an array over `pointer` (the memory of `owner`), read-only, with `owner`
/// as its base object.
#[allow(unsafe_code)]
fn from_owner<'py>(
    py: Python<'py>,
    typenum: NPY_TYPES,
    ndim: i32,
    dims: &mut [npyffi::npy_intp],
    pointer: *const u8,
    owner: Bound<'py, Buffer>,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `dims` holds `ndim` dimensions whose product times the dtype's item size is
    // the length of the memory at `pointer` (checked by `numeric`); that memory is the
    // `Bytes` inside `owner`, immutable and alive as long as `owner`, which becomes the
    // array's base (`PyArray_SetBaseObject` takes our reference, on failure too). The flags
    // (0) make the array read-only; numpy computes alignment and contiguity itself. The
    // descriptor reference from `PyArray_DescrFromType` is taken by `PyArray_NewFromDescr`.
    unsafe {
        let descr = PY_ARRAY_API.PyArray_DescrFromType(py, typenum as i32);
        if descr.is_null() {
            return Err(PyErr::fetch(py));
        }
        let array = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type),
            descr,
            ndim,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            pointer as *mut std::ffi::c_void,
            0,
            std::ptr::null_mut(),
        );
        if array.is_null() {
            return Err(PyErr::fetch(py));
        }
        let array = Bound::from_owned_ptr(py, array);
        let base = owner.into_ptr();
        if PY_ARRAY_API.PyArray_SetBaseObject(py, array.as_ptr() as *mut npyffi::PyArrayObject, base) != 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(array)
    }
}

static SPARSE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static RAGGED: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The package's class `name` of `readerd.tensors`, looked up once.
fn tensor_class<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyAny>>,
    name: &str,
) -> PyResult<&'py Bound<'py, PyAny>> {
    cell.get_or_try_init(py, || Ok(py.import("readerd.tensors")?.getattr(name)?.unbind())).map(|class| class.bind(py))
}

/// A tensor of any kind: a dense one as [`dense`] makes it, a sparse one as
/// `readerd.Sparse`, a ragged one as `readerd.Ragged` (the package's classes).
pub fn tensor<'py>(py: Python<'py>, name: &str, tensor: pb::Tensor) -> PyResult<Bound<'py, PyAny>> {
    let missing = || PyValueError::new_err(format!("feature {name}: a tensor without its parts"));
    match tensor.kind.ok_or_else(missing)? {
        pb::tensor::Kind::Dense(d) => dense(py, d),
        pb::tensor::Kind::Sparse(s) => {
            let (indices, values, dense_shape) =
                (s.indices.ok_or_else(missing)?, s.values.ok_or_else(missing)?, s.dense_shape.ok_or_else(missing)?);
            let class = tensor_class(py, &SPARSE, "Sparse")?;
            class.call1((dense(py, indices)?, dense(py, values)?, dense(py, dense_shape)?))
        }
        pb::tensor::Kind::Ragged(r) => {
            let flat = dense(py, r.flat_values.ok_or_else(missing)?)?;
            let splits = r.nested_row_splits.into_iter().map(|s| dense(py, s)).collect::<PyResult<Vec<_>>>()?;
            let shape: Vec<Option<i64>> = r.shape.iter().map(|&d| (d >= 0).then_some(d)).collect();
            let class = tensor_class(py, &RAGGED, "Ragged")?;
            class.call1((flat, PyTuple::new(py, splits)?, PyTuple::new(py, shape)?))
        }
    }
}
