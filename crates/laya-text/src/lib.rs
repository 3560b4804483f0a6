//! laya-text
