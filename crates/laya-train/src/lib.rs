//! laya-train
