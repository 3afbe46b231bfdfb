//! Record formats: JSON lines in, JSON text out.

pub mod json;
pub mod path;
