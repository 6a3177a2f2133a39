pub mod error;
pub mod format;
pub mod source;
