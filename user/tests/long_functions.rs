//! No function in src/ runs over [`MAX_LINES`] lines (from its `fn` line to its closing
//! brace, as rustfmt lays it out), but the few in [`EXCEPTIONS`]. The test prints every
//! function over the limit, and fails for any not excused, and for an excuse no longer needed.
use std::fs;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 150;

/// Functions allowed over the limit, by file under src/ and name, each with why. None today:
/// the simulator's event loop (`model/drive.rs::drive`), which issue 44 would allow whole if
/// splitting it cost speed, is split, and runs no slower for it.
const EXCEPTIONS: &[(&str, &str, &str)] = &[];

/// The source with comments, string and character literals blanked (newlines kept), so
/// the braces left are the code's.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if b[i..].starts_with(b"//") {
            let end = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let (mut depth, mut j) = (0, i);
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if !ident_before && raw_string_at(&b[i..]).is_some() {
            let (open, hashes) = raw_string_at(&b[i..]).unwrap_or((0, 0));
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let body = i + open;
            let end = b[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| body + p + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, (j + 1).min(b.len()));
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal ('{', '\n', '\u{7b}'), not a lifetime ('a).
            let len = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch) == Some(&b'\'')).then_some(ch + 2)
            };
            match len {
                Some(l) => {
                    blank(&mut out, i, i + l);
                    i += l;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// At a raw string (`r"`, `r#"`, `br##"` …): the length of its opening and its hashes.
fn raw_string_at(b: &[u8]) -> Option<(usize, usize)> {
    let start = usize::from(b.first() == Some(&b'b'));
    if b.get(start) != Some(&b'r') {
        return None;
    }
    let hashes = b[start + 1..].iter().take_while(|&&c| c == b'#').count();
    (b.get(start + 1 + hashes) == Some(&b'"')).then_some((start + 2 + hashes, hashes))
}

/// Every function with a body in `src`: (name, first line, lines).
fn functions(src: &str) -> Vec<(String, usize, usize)> {
    let code = code_only(src);
    let b = code.as_bytes();
    let line_of = |pos: usize| b[..pos].iter().filter(|&&c| c == b'\n').count() + 1;
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(p) = code[at..].find("fn ") {
        let start = at + p;
        at = start + 3;
        if start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_') {
            continue;
        }
        let name: String = code[at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // Its body: the first `{` before any `;` (a declaration in a trait has none).
        let Some(open) = code[at..].find(['{', ';']).map(|o| at + o) else {
            break;
        };
        if b[open] == b';' {
            continue;
        }
        let mut depth = 0usize;
        let mut close = open;
        for (k, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let first = line_of(start);
        found.push((name, first, line_of(close) - first + 1));
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for e in entries {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn the_brace_counter_measures_functions() {
    let src = "fn a() {\n    let s = \"}\";\n    let c = '{';\n    // }\n    x::<'a>();\n}\n\
               trait T { fn d(&self); }\nfn b() { r#\"}\"#; }\n";
    assert_eq!(
        functions(src),
        vec![("a".to_string(), 1, 6), ("b".to_string(), 8, 1)]
    );
}

#[test]
fn no_function_is_over_the_limit_but_the_exceptions() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut long = Vec::new();
    let mut excused = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        let text = fs::read_to_string(f).unwrap_or_else(|e| panic!("{rel}: {e}"));
        for (name, line, lines) in functions(&text) {
            let excuse = EXCEPTIONS.iter().find(|e| e.0 == rel && e.1 == name);
            if let Some(e) = excuse {
                excused.push((e.0, e.1, lines));
            }
            if lines > MAX_LINES {
                long.push((lines, format!("{rel}:{line} {name}"), excuse.map(|e| e.2)));
            }
        }
    }
    long.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (lines, at, excuse) in &long {
        let note = excuse.map(|e| format!(" ({e})")).unwrap_or_default();
        println!("{lines:5} lines  {at}{note}");
    }
    let over: Vec<&String> = long
        .iter()
        .filter(|l| l.2.is_none())
        .map(|l| &l.1)
        .collect();
    assert!(
        files.len() > 50,
        "{} files under src: the scan is not reading the tree",
        files.len()
    );
    assert!(
        over.is_empty(),
        "functions over {MAX_LINES} lines: {over:?}"
    );
    // An excuse for a function that is gone or now short would hide the next one to grow.
    let stale: Vec<_> = EXCEPTIONS
        .iter()
        .filter(|e| {
            !excused
                .iter()
                .any(|x| x.0 == e.0 && x.1 == e.1 && x.2 > MAX_LINES)
        })
        .map(|e| format!("{}::{}", e.0, e.1))
        .collect();
    assert!(
        stale.is_empty(),
        "excused but not over {MAX_LINES} lines: {stale:?}"
    );
}
