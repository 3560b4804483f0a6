//! Interoperability with the reference `gguf` Python package (scripts/gguf_interop.py).
//!
//! Direction A: files written here are read by `gguf.GGUFReader`; every key, value type, tensor
//! name, type, shape, offset and byte must match, and `gguf.quants.dequantize` must agree with
//! ours. Direction B: a model written by `gguf.GGUFWriter` (checksum patched in Python) loads
//! with `LayaFile::parse`, and our quantisers reproduce gguf-py's bytes exactly.
//!
//! Needs Python with gguf 0.19.0, numpy and xxhash: `$LAYA_PYTHON`, else `.venv/bin/python` at
//! the workspace root (made by `scripts/setup-python.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;

use laya_format::testing::{random_model, TinyConfig};
use laya_format::{quant, write_model, Activation, Array, GgmlType, GgufFile, GgufWriter, LayaFile, Mapping, NormRule, TensorData, Value};
use serde_json::{json, Value as Json};

const SETUP_HINT: &str = "run `scripts/setup-python.sh` at the workspace root (it creates .venv with gguf==0.19.0, \
                          numpy and xxhash), or point LAYA_PYTHON at a Python that has them";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> PathBuf {
    let py = match std::env::var_os("LAYA_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => {
            let venv = root().join(".venv/bin/python");
            if !venv.exists() {
                panic!("no Python environment for the gguf interop test: {SETUP_HINT}");
            }
            venv
        }
    };
    let ok = Command::new(&py).args(["-c", "import gguf, numpy, xxhash"]).output().map(|o| o.status.success()).unwrap_or(false);
    assert!(ok, "{} cannot import gguf, numpy and xxhash: {SETUP_HINT}", py.display());
    py
}

fn run_script(args: &[&str]) {
    let out = Command::new(python()).arg(root().join("scripts/gguf_interop.py")).args(args).output().expect("run scripts/gguf_interop.py");
    assert!(
        out.status.success(),
        "gguf_interop.py {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn read_json(path: &Path) -> Json {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn read_f32(path: &Path) -> Vec<f32> {
    std::fs::read(path).unwrap().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn type_name(t: laya_format::ValueType) -> &'static str {
    use laya_format::ValueType::*;
    match t {
        U8 => "UINT8",
        I8 => "INT8",
        U16 => "UINT16",
        I16 => "INT16",
        U32 => "UINT32",
        I32 => "INT32",
        F32 => "FLOAT32",
        Bool => "BOOL",
        String => "STRING",
        Array => "ARRAY",
        U64 => "UINT64",
        I64 => "INT64",
        F64 => "FLOAT64",
    }
}

/// What gguf-py reports for a value: its type names and its contents as JSON.
fn as_gguf_py(v: &Value) -> (Vec<&'static str>, Json) {
    let j = match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::F32(x) => json!(f64::from(*x)),
        Value::Bool(x) => json!(x),
        Value::String(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F64(x) => json!(x),
        Value::Array(a) => {
            let items = match a {
                Array::U8(v) => json!(v),
                Array::I8(v) => json!(v),
                Array::U16(v) => json!(v),
                Array::I16(v) => json!(v),
                Array::U32(v) => json!(v),
                Array::I32(v) => json!(v),
                Array::F32(v) => json!(v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>()),
                Array::Bool(v) => json!(v),
                Array::String(v) => json!(v.to_vec()),
                Array::U64(v) => json!(v),
                Array::I64(v) => json!(v),
                Array::F64(v) => json!(v),
                Array::Array(_) => panic!("nested arrays are not compared"),
            };
            return (vec!["ARRAY", type_name(a.element_type())], items);
        }
    };
    (vec![type_name(v.value_type())], j)
}

/// Reads `bytes` with gguf.GGUFReader and checks it sees exactly what `GgufFile` sees.
fn assert_gguf_py_reads_identically(bytes: &[u8], dir: &Path) {
    let path = dir.join("file.gguf");
    std::fs::write(&path, bytes).unwrap();
    run_script(&["read", path.to_str().unwrap(), dir.to_str().unwrap()]);
    let ours = GgufFile::parse(bytes).unwrap();

    let kv = read_json(&dir.join("kv.json"));
    assert_eq!(kv["alignment"], json!(ours.alignment));
    assert_eq!(kv["data_offset"], json!(ours.data_offset));
    let fields = kv["fields"].as_array().unwrap();
    let header: Vec<&Json> = fields.iter().filter(|f| f["name"].as_str().unwrap().starts_with("GGUF.")).collect();
    assert_eq!(header[0]["value"], json!(3));
    assert_eq!(header[1]["value"], json!(ours.tensors.len()));
    assert_eq!(header[2]["value"], json!(ours.kv.len()));
    let theirs: Vec<&Json> = fields.iter().filter(|f| !f["name"].as_str().unwrap().starts_with("GGUF.")).collect();
    assert_eq!(theirs.len(), ours.kv.len());
    for ((key, value), field) in ours.kv.iter().zip(theirs) {
        assert_eq!(field["name"], json!(key));
        let (types, contents) = as_gguf_py(value);
        assert_eq!(field["types"], json!(types), "{key}");
        assert_eq!(field["value"], contents, "{key}");
    }

    let tensors = read_json(&dir.join("tensors.json"));
    let tensors = tensors.as_array().unwrap();
    assert_eq!(tensors.len(), ours.tensors.len());
    for (i, (t, py)) in ours.tensors.iter().zip(tensors).enumerate() {
        assert_eq!(py["name"], json!(t.name));
        assert_eq!(py["type"], json!(t.ty.id()), "{}", t.name);
        assert_eq!(py["shape"], json!(t.ne), "{}", t.name);
        assert_eq!(py["n_bytes"], json!(t.size), "{}", t.name);
        assert_eq!(py["n_elements"], json!(t.n_elements()), "{}", t.name);
        assert_eq!(py["data_offset"], json!(t.offset), "{}", t.name);
        let data = ours.tensor_data(t);
        assert_eq!(std::fs::read(dir.join(format!("t{i}.raw"))).unwrap(), data, "{}", t.name);
        let mine = quant::dequantize(data, t.ty, t.n_elements() as usize).unwrap();
        assert_close(&mine, &read_f32(&dir.join(format!("t{i}.f32"))), &t.name);
    }
}

fn assert_close(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(x.to_bits() == y.to_bits() || (x - y).abs() <= 1e-6, "{what}[{i}]: ours {x}, gguf-py {y}");
    }
}

/// A model whose matrices cycle through every type Laya allows.
fn mixed_type_model() -> (laya_format::ModelMeta, Vec<TensorData>) {
    let cfg = TinyConfig { feed_forward_length: vec![64, 32], ..TinyConfig::small() };
    let (meta, mut tensors) = random_model(&cfg, 77, GgmlType::F32);
    let cycle = [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::F16, GgmlType::BF16, GgmlType::F32];
    let mut next = 0;
    for t in &mut tensors {
        let ty = match t.name.as_str() {
            "pos_embd.weight" => GgmlType::BF16,
            "replace.weight" => GgmlType::F16,
            _ if t.ne.len() == 2 => {
                next += 1;
                cycle[(next - 1) % cycle.len()]
            }
            _ => continue,
        };
        let n = t.ne.iter().product::<u64>() as usize;
        let values = quant::dequantize(&t.data, t.ty, n).unwrap();
        *t = TensorData::from_f32(&t.name, ty, &t.ne.clone(), &values).unwrap();
    }
    (meta, tensors)
}

#[test]
fn gguf_py_reads_a_laya_model_written_here() {
    let (meta, tensors) = mixed_type_model();
    let types: std::collections::HashSet<GgmlType> = tensors.iter().map(|t| t.ty).collect();
    assert_eq!(types.len(), 6, "every type is exercised");
    let bytes = write_model(&meta, &tensors).unwrap();
    assert_gguf_py_reads_identically(&bytes, &scratch("interop-model"));
}

#[test]
fn gguf_py_reads_a_generic_container_written_here() {
    let mut w = GgufWriter::new(); // default alignment 32, no general.alignment key
    w.add_kv("general.architecture", Value::String("test".into()));
    w.add_kv("v.u8", Value::U8(255));
    w.add_kv("v.i8", Value::I8(-128));
    w.add_kv("v.u16", Value::U16(65535));
    w.add_kv("v.i16", Value::I16(-32768));
    w.add_kv("v.u32", Value::U32(u32::MAX));
    w.add_kv("v.i32", Value::I32(i32::MIN));
    w.add_kv("v.f32", Value::F32(0.1));
    w.add_kv("v.bool", Value::Bool(false));
    w.add_kv("v.string", Value::String("中文 😀 \"quoted\"".into()));
    w.add_kv("v.u64", Value::U64(u64::MAX));
    w.add_kv("v.i64", Value::I64(i64::MIN));
    w.add_kv("v.f64", Value::F64(-2.5e-300));
    w.add_kv("a.u8", Value::Array(Array::U8(vec![0, 255])));
    w.add_kv("a.i16", Value::Array(Array::I16(vec![-2, 3])));
    w.add_kv("a.u32", Value::Array(Array::U32(vec![1, 2, 3])));
    w.add_kv("a.i32", Value::Array(Array::I32(vec![-7])));
    w.add_kv("a.f32", Value::Array(Array::F32(vec![0.25, -1e-3])));
    w.add_kv("a.bool", Value::Array(Array::Bool(vec![true, false, true])));
    w.add_kv("a.string", Value::Array(Array::String(["a", "", "東京"].into_iter().collect())));
    w.add_kv("a.u64", Value::Array(Array::U64(vec![u64::MAX, 0])));
    w.add_kv("a.f64", Value::Array(Array::F64(vec![1.5])));
    let values: Vec<f32> = (0..96).map(|i| (i as f32 * 0.37).sin()).collect();
    for (name, ty, ne) in [
        ("f32", GgmlType::F32, vec![96u64]),
        ("f16", GgmlType::F16, vec![32, 3]),
        ("bf16", GgmlType::BF16, vec![3, 32]),
        ("q8_0", GgmlType::Q8_0, vec![32, 3]),
        ("q4_0", GgmlType::Q4_0, vec![96, 1]),
        ("q4_1", GgmlType::Q4_1, vec![32, 1, 3]),
    ] {
        w.push_tensor(TensorData::from_f32(name, ty, &ne, &values).unwrap()).unwrap();
    }
    assert_gguf_py_reads_identically(&w.to_bytes(), &scratch("interop-generic"));
}

#[test]
fn laya_reads_a_model_written_by_gguf_py() {
    let dir = scratch("interop-python-model");
    run_script(&["write", dir.to_str().unwrap()]);
    let bytes = std::fs::read(dir.join("model.laya")).unwrap();
    let model = LayaFile::parse(&bytes).unwrap_or_else(|e| panic!("gguf-py's model does not load: {e}"));
    let ex = read_json(&dir.join("expected.json"));
    let m = &model.meta;
    let h = &m.hparams;

    assert_eq!(json!(model.checksum), ex["checksum"]);
    assert_eq!(json!(m.name), ex["name"]);
    assert_eq!(json!(h.context_length), ex["context_length"]);
    assert_eq!(json!(h.embedding_length), ex["embedding_length"]);
    assert_eq!(json!(h.block_count), ex["block_count"]);
    assert_eq!(json!(h.head_count), ex["head_count"]);
    assert_eq!(json!(f64::from(h.layer_norm_epsilon)), ex["layer_norm_epsilon"]);
    assert_eq!(json!(h.feed_forward_length), ex["feed_forward_length"]);
    assert_eq!(h.activation, Activation::Relu);
    assert_eq!(json!(h.position_scheme.name()), ex["position_scheme"]);
    assert_eq!(json!(h.embedding_rows), ex["embedding_rows"]);
    match &h.mapping {
        Mapping::Table(cps) => assert_eq!(json!(cps), ex["codepoints"]),
        Mapping::Direct => panic!("expected a table mapping"),
    }
    assert_eq!(json!(h.replace_classes), ex["replace_classes"]);
    assert_eq!(json!(m.words.to_vec()), ex["words"]);
    assert_eq!(json!(m.frequencies), ex["frequencies"]);
    assert_eq!(m.normalization, vec![NormRule::FullwidthAscii]);
    assert_eq!(json!(m.provenance.language), ex["language"]);
    assert_eq!(json!(m.provenance.training_data), ex["training_data"]);
    assert_eq!(json!(m.provenance.created), ex["created"]);
    assert_eq!(m.provenance.tool, None);

    let expected = ex["tensors"].as_array().unwrap();
    let ours = model.tensors();
    assert_eq!(ours.len(), expected.len());
    for (i, e) in expected.iter().enumerate() {
        let name = e["name"].as_str().unwrap();
        let t = ours.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(json!(t.ty.id()), e["type"], "{name}");
        assert_eq!(json!(t.ne), e["ne"], "{name}");
        let raw = std::fs::read(dir.join(format!("w{i}.raw"))).unwrap();
        assert_eq!(t.data, &raw[..], "{name}");
        assert_eq!((t.data.as_ptr() as usize - bytes.as_ptr() as usize) % 64, 0, "{name} aligned");
        // Our quantisers reproduce gguf-py's (ggml's reference) bytes exactly.
        let src = read_f32(&dir.join(format!("w{i}.src")));
        assert_eq!(quant::quantize(&src, t.ty).unwrap(), raw, "{name}: quantised bytes differ from gguf-py");
        assert_close(&t.to_f32().unwrap(), &read_f32(&dir.join(format!("w{i}.f32"))), name);
    }

    // Re-writing the same content here gives a file that also loads, with the same tensors.
    let tensors: Vec<TensorData> =
        ours.iter().map(|t| TensorData { name: t.name.clone(), ty: t.ty, ne: t.ne.clone(), data: t.data.to_vec() }).collect();
    let again = write_model(m, &tensors).unwrap();
    assert_eq!(&LayaFile::parse(&again).unwrap().meta, m);
    // gguf-py pads after the last tensor and we do not; the reader accepts both.
    assert_eq!(bytes.len() % 64, 0);
    let last_end = ours.iter().map(|t| t.data.as_ptr() as usize + t.data.len() - bytes.as_ptr() as usize).max();
    assert!(last_end < Some(bytes.len()), "the Python file has trailing padding");
}
