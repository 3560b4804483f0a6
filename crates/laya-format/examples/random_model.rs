//! Writes a deterministic random Laya model of any size, for benchmarks and experiments:
//!
//!     cargo run --release -p laya-format --example random_model -- OUT.laya [VOCAB] [TYPE] [D] [FFN] [LAYERS] [POSITIONS] [WORD_CLASSES]
//!
//! Defaults are the seed shape of SPEC.md: lexicon 512, F32, d 128, FFN 512, 3 blocks,
//! 2 heads, 16-character context, 65,536-row direct embedding, `learned_absolute` positions
//! (`relative_causal` for the causal window that keeps keys and values between keystrokes),
//! a flat word head (`WORD_CLASSES` > 0: a factorised one with about that many classes).
use laya_format::testing::{random_model, TinyConfig};
use laya_format::{write_model, GgmlType, PositionScheme};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.first() else {
        eprintln!("usage: random_model OUT.laya [VOCAB] [TYPE] [D] [FFN] [LAYERS] [learned_absolute|relative_causal] [WORD_CLASSES]");
        std::process::exit(2);
    };
    let num = |i: usize, default: u32| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default);
    let ty = match args.get(2).map(String::as_str).unwrap_or("f32").to_ascii_lowercase().as_str() {
        "f32" => GgmlType::F32,
        "f16" => GgmlType::F16,
        "bf16" => GgmlType::BF16,
        "q8_0" => GgmlType::Q8_0,
        "q4_0" => GgmlType::Q4_0,
        "q4_1" => GgmlType::Q4_1,
        other => {
            eprintln!("unknown type {other}: use f32, f16, bf16, q8_0, q4_0 or q4_1");
            std::process::exit(2);
        }
    };
    let name = args.get(6).map(String::as_str).unwrap_or("learned_absolute");
    let Some(position_scheme) = PositionScheme::from_name(name) else {
        eprintln!("unknown position scheme {name}: use learned_absolute or relative_causal");
        std::process::exit(2);
    };
    let cfg = TinyConfig {
        position_scheme,
        context_length: 16,
        embedding_length: num(3, 128),
        head_count: 2,
        feed_forward_length: vec![num(4, 512); num(5, 3) as usize],
        table_rows: None,
        vocab: num(1, 512) as usize,
        replace_classes: 8,
        word_classes: num(7, 0),
        ..TinyConfig::default()
    };
    let (meta, tensors) = random_model(&cfg, 1, ty);
    let bytes = match write_model(&meta, &tensors) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("random_model: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = std::fs::write(out, &bytes) {
        eprintln!("random_model: cannot write {out}: {e}");
        std::process::exit(1);
    }
    eprintln!("wrote {out}: {} bytes, lexicon {}, {:?}", bytes.len(), cfg.vocab, ty);
}
