//! Files: the file source (newline-delimited JSON, split across subtasks)
//! and the file sink (part files, published two-phase at checkpoints).

pub mod sink;
pub mod source;
