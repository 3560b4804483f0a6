//! laya-kernels
