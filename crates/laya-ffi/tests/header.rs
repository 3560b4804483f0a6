//! include/laya.h is written by hand; this test keeps it honest. Every function exported by
//! src/lib.rs (`#[no_mangle] pub [unsafe] extern "C" fn`) must be declared in the header with
//! the same name, return type and parameter types, and vice versa; every `LAYA_*` constant
//! must have the same value; `laya_candidate` must have the same fields in the same order.

use std::collections::BTreeMap;

const HEADER: &str = include_str!("../include/laya.h");
const SOURCE: &str = include_str!("../src/lib.rs");

/// A signature in C spelling: return type and parameter types, names dropped.
#[derive(Debug, PartialEq)]
struct Sig {
    ret: String,
    params: Vec<String>,
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ").replace(" *", "*")
}

fn strip_c_comments(src: &str) -> String {
    let mut out = String::new();
    let mut rest = src;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        rest = rest[i..].find("*/").map_or("", |j| &rest[i + j + 2..]);
    }
    out.push_str(rest);
    out.lines().filter(|l| !l.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n")
}

/// Drops the parameter name: the last identifier, if the declaration has more than a type.
fn c_param_type(p: &str) -> String {
    let p = squash(p);
    if p == "void" {
        return p;
    }
    let cut = p.rfind(|c: char| !(c.is_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
    squash(&p[..cut])
}

fn header_functions() -> BTreeMap<String, Sig> {
    let text = strip_c_comments(HEADER);
    let mut fns = BTreeMap::new();
    for decl in text.split(';') {
        let decl = squash(decl);
        let Some(open) = decl.find('(') else { continue };
        if decl.starts_with("typedef") || decl.contains('{') || decl.contains('}') {
            continue;
        }
        let head = &decl[..open];
        let name_at = head.rfind(|c: char| !(c.is_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
        let name = head[name_at..].to_string();
        let ret = squash(&head[..name_at]);
        let inner = &decl[open + 1..decl.rfind(')').expect("closing parenthesis")];
        let params: Vec<String> = inner.split(',').map(c_param_type).filter(|p| p != "void").collect();
        assert!(name.starts_with("laya_"), "unexpected declaration in laya.h: {decl}");
        assert!(fns.insert(name.clone(), Sig { ret, params }).is_none(), "{name} declared twice");
    }
    fns
}

/// The Rust type as it is spelt in C.
fn rust_to_c(ty: &str) -> String {
    let ty = ty.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some(rest) = ty.strip_prefix("*const ") {
        let inner = rust_to_c(rest);
        return if inner.ends_with('*') { format!("{inner} const*") } else { format!("const {inner}*") };
    }
    if let Some(rest) = ty.strip_prefix("*mut ") {
        return format!("{}*", rust_to_c(rest));
    }
    match ty.as_str() {
        "c_char" => "char",
        "usize" => "size_t",
        "u64" => "uint64_t",
        "u32" => "uint32_t",
        "i32" => "int32_t",
        "f32" => "float",
        "()" | "" => "void",
        other => other, // laya_* types keep their names
    }
    .to_string()
}

fn rust_functions() -> BTreeMap<String, Sig> {
    let mut fns = BTreeMap::new();
    let mut rest = SOURCE;
    while let Some(i) = rest.find("extern \"C\" fn ") {
        let before = &rest[..i];
        let after = &rest[i + "extern \"C\" fn ".len()..];
        // Only exported functions: `#[no_mangle]` on the lines just above, and `pub`.
        let attrs: Vec<&str> = before.lines().rev().take(2).collect();
        assert!(attrs.iter().any(|l| l.contains("#[no_mangle]")), "extern fn without #[no_mangle] before {after:.40}");
        assert!(attrs[0].trim_start().starts_with("pub "), "extern fn that is not pub: {after:.40}");
        let open = after.find('(').unwrap();
        let name = after[..open].trim().to_string();
        // Parameters end at the parenthesis that balances the opening one.
        let mut depth = 0;
        let close = after
            .char_indices()
            .find(|&(_, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                depth == 0 && c == ')'
            })
            .unwrap()
            .0;
        let params: Vec<String> = after[open + 1..close]
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| rust_to_c(p.split_once(':').expect("name: type").1))
            .collect();
        let tail = &after[close + 1..];
        let ret_src = tail[..tail.find('{').unwrap()].trim();
        let ret = rust_to_c(ret_src.strip_prefix("->").unwrap_or("()").trim());
        fns.insert(name, Sig { ret, params });
        rest = &after[close..];
    }
    fns
}

#[test]
fn every_exported_function_is_declared_identically_and_vice_versa() {
    let (c, rust) = (header_functions(), rust_functions());
    assert!(rust.len() >= 10, "parser found only {:?}", rust.keys());
    let only_c: Vec<_> = c.keys().filter(|k| !rust.contains_key(*k)).collect();
    let only_rust: Vec<_> = rust.keys().filter(|k| !c.contains_key(*k)).collect();
    assert!(only_c.is_empty(), "declared in laya.h but not exported: {only_c:?}");
    assert!(only_rust.is_empty(), "exported but missing from laya.h: {only_rust:?}");
    for (name, sig) in &rust {
        assert_eq!(&c[name], sig, "{name}: laya.h and src/lib.rs disagree");
    }
}

#[test]
fn constants_agree() {
    let mut c = BTreeMap::new();
    for line in HEADER.lines() {
        if let Some(rest) = line.trim().strip_prefix("#define LAYA_") {
            if let Some((name, value)) = rest.split_once(' ') {
                c.insert(format!("LAYA_{name}"), value.trim().parse::<i32>().unwrap());
            }
        }
    }
    let mut rust = BTreeMap::new();
    for line in SOURCE.lines() {
        if let Some(rest) = line.trim().strip_prefix("pub const LAYA_") {
            let (name, rest) = rest.split_once(": ").unwrap();
            let (_ty, value) = rest.split_once(" = ").unwrap();
            rust.insert(format!("LAYA_{name}"), value.trim_end_matches(';').parse::<i32>().unwrap());
        }
    }
    assert_eq!(c, rust);
    assert_eq!(rust["LAYA_OK"], laya_ffi::LAYA_OK);
    assert_eq!(rust["LAYA_ERR_PANIC"], laya_ffi::LAYA_ERR_PANIC);
}

#[test]
fn laya_candidate_fields_agree() {
    let c_struct = &HEADER[HEADER.find("typedef struct laya_candidate {").unwrap()..];
    let body = &c_struct[c_struct.find('{').unwrap() + 1..c_struct.find('}').unwrap()];
    let c_fields: Vec<String> = strip_c_comments(body).split(';').map(squash).filter(|f| !f.is_empty()).collect();
    let r_struct = &SOURCE[SOURCE.find("pub struct laya_candidate {").unwrap()..];
    let r_body = &r_struct[r_struct.find('{').unwrap() + 1..r_struct.find('}').unwrap()];
    let r_fields: Vec<String> = r_body
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("pub "))
        .map(|l| {
            let (name, ty) = l.trim_start_matches("pub ").trim_end_matches(',').split_once(':').unwrap();
            squash(&format!("{} {}", rust_to_c(ty), name.trim()))
        })
        .collect();
    assert_eq!(c_fields, r_fields);
    assert_eq!(std::mem::size_of::<laya_ffi::laya_candidate>(), 2 * std::mem::size_of::<usize>() + 8);
}
