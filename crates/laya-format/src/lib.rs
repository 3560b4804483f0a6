//! laya-format
