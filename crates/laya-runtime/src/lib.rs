//! laya-runtime
