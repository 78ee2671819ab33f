//! The house's own checks: what keeps the workspace honest as it grows, without a tool that
//! has to be installed. Every dependency a crate declares is used by its code (the convention of
//! `cargo machete`: `[package.metadata.cargo-machete] ignored = [...]` names one kept for its
//! features alone); every path the map (`docs/ARCHITECTURE.md`) and README name exists; the docs
//! name the protocol the code speaks; source files keep the house's lengths; one licence.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    hero_testkit::workspace_root()
}

/// Every file under `dir`, as paths relative to the workspace root with `/` separators, leaving
/// out build output, git's store and installed packages.
fn files_under(dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        if matches!(
            name.as_str(),
            "target" | ".git" | "node_modules" | ".venv" | "__pycache__"
        ) {
            continue;
        }
        if path.is_dir() {
            files_under(&path, out);
        } else if let Ok(rel) = path.strip_prefix(root()) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

fn workspace_files() -> Vec<String> {
    let mut out = Vec::new();
    files_under(&root(), &mut out);
    out
}

/// The workspace members, from the root manifest.
fn members() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).expect("root Cargo.toml");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The entries of a manifest, with the table each stands in: `(table, line)` for every line
/// that is not a table header, a comment or blank.
fn entries(manifest: &str) -> Vec<(String, &str)> {
    let mut table = String::new();
    let mut out = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            table = line.trim_matches(|c| c == '[' || c == ']').to_string();
        } else if !line.is_empty() && !line.starts_with('#') {
            out.push((table.clone(), line));
        }
    }
    out
}

/// The name a dependency line declares (`tokio.workspace = true`, `redis = { ... }`).
fn dependency_name(line: &str) -> String {
    line.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect()
}

/// The dependencies a manifest declares (every `*dependencies` table, target-specific ones
/// included), and the ones its cargo-machete metadata says to skip.
fn declared(manifest: &str) -> (Vec<String>, BTreeSet<String>) {
    let mut deps = Vec::new();
    let mut ignored = BTreeSet::new();
    for (table, line) in entries(manifest) {
        if table == "package.metadata.cargo-machete" && line.starts_with("ignored") {
            ignored.extend(line.split('"').skip(1).step_by(2).map(str::to_string));
        }
        if table.ends_with("dependencies") && table != "workspace.dependencies" {
            deps.push(dependency_name(line));
        }
    }
    deps.retain(|d| !d.is_empty());
    (deps, ignored)
}

/// Whether `name` (a crate name, `-` read as `_`) appears as a whole word in `code`.
fn names(code: &str, name: &str) -> bool {
    let ident = name.replace('-', "_");
    code.match_indices(&ident).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        let after = code[i + ident.len()..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !word(before) && !word(after)
    })
}

#[test]
fn every_dependency_a_crate_declares_is_used_by_its_code() {
    let files = workspace_files();
    let members = members();
    let mut unused = Vec::new();
    for member in &members {
        let manifest = std::fs::read_to_string(root().join(member).join("Cargo.toml"))
            .unwrap_or_else(|e| panic!("reading {member}/Cargo.toml: {e}"));
        let (deps, ignored) = declared(&manifest);
        // a member's code is its own files, not those of a member nested inside it
        let code: String = files
            .iter()
            .filter(|f| {
                f.starts_with(&format!("{member}/"))
                    && Path::new(f).extension().is_some_and(|e| e == "rs")
            })
            .filter(|f| {
                !members.iter().any(|m| {
                    m != member && m.starts_with(member.as_str()) && f.starts_with(&format!("{m}/"))
                })
            })
            .map(|f| std::fs::read_to_string(root().join(f)).unwrap_or_default())
            .collect();
        for dep in deps {
            if !ignored.contains(&dep) && !names(&code, &dep) {
                unused.push(format!("{member}: {dep}"));
            }
        }
    }
    assert!(
        unused.is_empty(),
        "dependencies no code of their crate names (remove them, or list one kept for its \
         features under [package.metadata.cargo-machete] ignored): {unused:?}"
    );
}

#[test]
fn every_workspace_dependency_is_declared_by_a_member() {
    let root_manifest =
        std::fs::read_to_string(root().join("Cargo.toml")).expect("root Cargo.toml");
    let offered: Vec<String> = entries(&root_manifest)
        .into_iter()
        .filter(|(table, _)| table == "workspace.dependencies")
        .map(|(_, line)| dependency_name(line))
        .filter(|name| !name.is_empty())
        .collect();
    let taken: BTreeSet<String> = members()
        .iter()
        .flat_map(|m| {
            let manifest =
                std::fs::read_to_string(root().join(m).join("Cargo.toml")).unwrap_or_default();
            declared(&manifest).0
        })
        .collect();
    let unused: Vec<_> = offered.iter().filter(|d| !taken.contains(*d)).collect();
    assert!(
        unused.is_empty(),
        "[workspace.dependencies] that no member declares: {unused:?}"
    );
}

/// The paths a document names in backticks: a file name with a known extension, or a path of
/// folders; placeholders (`<name>.rs`), globs and paths outside the repository are left out.
fn named_paths(doc: &str) -> Vec<String> {
    const EXTENSIONS: [&str; 11] = [
        ".rs", ".lua", ".md", ".toml", ".py", ".mjs", ".sh", ".json", ".yml", ".service", ".js",
    ];
    const TOP: [&str; 12] = [
        "protocol",
        "client",
        "admin",
        "worker-sdk",
        "broker",
        "benches",
        "tests",
        "deploy",
        "docs",
        "scripts",
        "python",
        ".ci",
    ];
    doc.split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| !t.contains(['<', '*', ' ', '{', ':', '$']) && !t.starts_with("../"))
        .filter(|t| {
            let file = EXTENSIONS.iter().any(|e| t.ends_with(e));
            // a folder is named from the top of the repository (`broker/src/loops/`); build
            // output (`target/...`) is made by a run, not kept in the tree
            let top = t.split('/').next().unwrap_or_default();
            let folder = t.contains('/')
                && TOP.contains(&top)
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "/_-.".contains(c));
            (file || folder) && !t.contains("://")
        })
        .map(|t| t.trim_end_matches('/').to_string())
        .collect()
}

/// Whether `named` is a file or folder of the tree: a bare name matches any file of that name,
/// a path with folders matches at a folder boundary (`functions/submit.rs` is
/// `tests/tests/functions/submit.rs`).
fn exists(files: &[String], named: &str) -> bool {
    files.iter().any(|f| {
        let f = format!("/{f}");
        f.ends_with(&format!("/{named}")) || f.contains(&format!("/{named}/"))
    })
}

#[test]
fn every_path_the_architecture_map_and_readme_name_exists() {
    let files = workspace_files();
    let mut missing = Vec::new();
    for doc in [
        "docs/ARCHITECTURE.md",
        "README.md",
        "docs/protocol.md",
        "docs/configuration.md",
        "docs/http.md",
        "docs/operations.md",
        "docs/benchmarks.md",
        "docs/chaos.md",
        "docs/migration.md",
        "docs/guarantees.md",
        "CHANGELOG.md",
    ] {
        let text = std::fs::read_to_string(root().join(doc))
            .unwrap_or_else(|e| panic!("reading {doc}: {e}"));
        let paths = named_paths(&text);
        assert!(
            !paths.is_empty() || doc != "docs/ARCHITECTURE.md",
            "the map names no path at all: the check reads nothing"
        );
        for p in paths {
            if !exists(&files, &p) {
                missing.push(format!("{doc}: `{p}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths the docs name that are not in the tree (a file moved or was renamed: fix the doc): {missing:#?}"
    );
}

#[test]
fn the_path_check_finds_a_path_that_is_gone() {
    let files = workspace_files();
    assert!(exists(&files, "protocol/src/keys/mod.rs"));
    assert!(exists(&files, "functions/submit.rs"));
    assert!(exists(&files, "broker/src/loops"));
    assert!(
        !exists(&files, "protocol/src/keys.rs"),
        "a file that moved into a folder"
    );
    assert!(
        named_paths("see `client/src/inspect.rs` and `<name>.lua`")
            == vec!["client/src/inspect.rs"]
    );
}

/// The phrases by which a doc names the protocol version the code speaks now (as against "since
/// protocol 23", which names history): each must name `LIBRARY_VERSION`.
const CURRENT_PROTOCOL: [&str; 3] = ["speaks protocol ", "protocol version (", "now `hero_v"];

/// Where `text` names a current protocol other than `version`: (phrase, number named).
fn stale_protocols(text: &str, version: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for phrase in CURRENT_PROTOCOL {
        for (at, _) in text.match_indices(phrase) {
            let named: String = text[at + phrase.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if named != version {
                out.push((phrase.trim().to_string(), named));
            }
        }
    }
    out
}

#[test]
fn every_doc_that_names_the_current_protocol_names_this_one() {
    let version = hero_protocol::function::LIBRARY_VERSION;
    let mut stale = Vec::new();
    let mut named = 0;
    let markdown = |f: &&String| Path::new(f.as_str()).extension().is_some_and(|e| e == "md");
    for f in workspace_files().iter().filter(markdown) {
        if f == "CHANGELOG.md" || f.ends_with("performance.md") {
            continue; // history: each entry names the version of its day
        }
        let text = std::fs::read_to_string(root().join(f)).unwrap_or_default();
        named += CURRENT_PROTOCOL
            .iter()
            .map(|p| text.matches(p).count())
            .sum::<usize>();
        for (phrase, n) in stale_protocols(&text, version) {
            stale.push(format!("{f}: \"{phrase} {n}\""));
        }
    }
    assert!(
        named >= 3,
        "the READMEs and the map name the protocol: the check reads nothing"
    );
    assert!(
        stale.is_empty(),
        "docs that name another protocol than the code's {version} as the current one: {stale:#?}"
    );
    assert_eq!(
        stale_protocols("The package speaks protocol 28 and (now `hero_v29`)", "29"),
        vec![("speaks protocol".to_string(), "28".to_string())]
    );
}

/// The house's lengths: a Lua file of the library at most 400 lines, any other hand-written
/// source file at most 600 (generated files and frozen fixtures aside).
fn too_long(files: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for f in files {
        let limit = match f.rsplit('.').next() {
            Some("lua") => 400,
            Some("rs" | "ts" | "mjs" | "js" | "py" | "sh") => 600,
            _ => continue,
        };
        if f.starts_with("docs/")
            || f.contains("/fixtures/")
            || f.contains("/dist/")
            || f.ends_with(".generated.ts")
            || f.ends_with("hero-library.lua")
        {
            continue;
        }
        let lines = std::fs::read_to_string(root().join(f))
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if lines > limit {
            out.push(format!("{f}: {lines} lines (the house says {limit})"));
        }
    }
    out
}

#[test]
fn every_source_file_is_within_the_houses_length() {
    let long = too_long(&workspace_files());
    assert!(
        long.is_empty(),
        "split these where their topics part: {long:#?}"
    );
}

/// One licence across the repository: the workspace's, named by every package's manifest, its
/// text at the root and in the Node package (npm packs only what is under `node/`).
#[test]
fn one_licence_across_the_repository() {
    let read = |f: &str| std::fs::read_to_string(root().join(f)).unwrap_or_default();
    let licence = "Apache-2.0";
    assert!(read("Cargo.toml").contains(&format!("license = \"{licence}\"")));
    assert!(read("python/pyproject.toml").contains(&format!("license = \"{licence}\"")));
    assert!(read("node/package.json").contains(&format!("\"license\": \"{licence}\"")));
    let text = read("LICENSE");
    assert!(text.contains("Apache License") && text.contains("Version 2.0"));
    assert_eq!(read("node/LICENSE"), text, "node/LICENSE is the root's");
    for (table, line) in members()
        .iter()
        .flat_map(|m| {
            let manifest = read(&format!("{m}/Cargo.toml"));
            entries(&manifest)
                .into_iter()
                .map(|(t, l)| (t, l.to_string()))
                .collect::<Vec<_>>()
        })
        .filter(|(t, l)| t == "package" && l.starts_with("license"))
    {
        assert_eq!(line, "license.workspace = true", "[{table}] {line}");
    }
}
