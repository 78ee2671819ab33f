//! The library's own checks: headers, registration, the shipped file.

use super::*;
use crate::error::ServerCode;

#[test]
fn every_error_code_in_the_lua_sources_is_a_server_code() {
    let mut sources = vec![PRELUDE];
    sources.extend(Function::ALL.iter().map(|f| f.source()));
    let mut seen = Vec::new();
    for src in sources {
        let mut rest = src;
        while let Some(at) = rest.find("HERO_") {
            let code: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            if code != "HERO_" {
                // `HERO_<CODE>` in a comment is the pattern, not a code
                assert!(
                    ServerCode::parse(&code).is_some(),
                    "{code} is raised in Lua but not in ServerCode"
                );
                seen.push(code);
            }
            rest = &rest[at + 5..];
        }
    }
    for c in ServerCode::ALL {
        assert!(
            seen.iter().any(|s| s == c.as_str()),
            "{c} is in ServerCode but no Lua raises it"
        );
    }
}

#[test]
fn every_function_file_has_a_header_and_defines_its_function() {
    for f in Function::ALL {
        let src = f.source();
        let local = format!("hero_{}", f.short());
        assert!(src.starts_with(&format!("-- {local}:")), "{local} header");
        assert!(src.contains("-- Returns:"), "{local} documents its returns");
        assert!(src.contains(&format!("local function {local}(")));
    }
    let v = LIBRARY_VERSION;
    assert!(library_source().contains(&format!(
        "redis.register_function('hero_v{v}_submit', hero_submit)"
    )));
    // a function that drains a full Redis carries allow-oom; submit does not
    assert!(library_source().contains(&format!(
        "redis.register_function{{function_name='hero_v{v}_recover', callback=hero_recover, flags={{'allow-oom'}}}}"
    )));
    assert_eq!(Function::Recover.name(), format!("hero_v{v}_recover"));
    assert_eq!(LIBRARY_NAME, format!("hero_v{v}"));
}

/// Clients in other languages load the library from `docs/hero-library.lua` (the Python
/// package's wheel packs it from there) and `node/hero-library.lua` (inside the Node
/// package's folder, so it builds and packs from that folder alone); each must be this
/// version's, and the packages must speak it. `HERO_WRITE_LIBRARY=1 cargo test -p
/// hero-protocol shipped` writes both anew.
#[test]
fn the_shipped_library_file_is_this_versions_library() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for file in ["docs/hero-library.lua", "node/hero-library.lua"] {
        let path = root.join(file);
        if std::env::var_os("HERO_WRITE_LIBRARY").is_some() {
            std::fs::write(&path, library_source()).expect("write the shipped library");
        }
        let shipped = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            shipped == library_source(),
            "{file} is not the library of version {LIBRARY_VERSION}: run \
             HERO_WRITE_LIBRARY=1 cargo test -p hero-protocol shipped"
        );
    }
    let py = std::fs::read_to_string(root.join("python/hero/protocol.py")).unwrap_or_default();
    assert!(
        py.contains(&format!("VERSION = \"{LIBRARY_VERSION}\"")),
        "python/hero/protocol.py speaks another version than {LIBRARY_VERSION}"
    );
    let node = std::fs::read_to_string(root.join("node/src/protocol.ts")).unwrap_or_default();
    assert!(
        node.contains(&format!("export const VERSION = \"{LIBRARY_VERSION}\";")),
        "node/src/protocol.ts speaks another version than {LIBRARY_VERSION}"
    );
    // each package says its release once in code, once in its manifest
    let release_of = |src: &str, open: &str| {
        src.split_once(open)
            .and_then(|(_, r)| r.split_once('"'))
            .map(|(v, _)| v.to_string())
            .unwrap_or_default()
    };
    let pyproject = std::fs::read_to_string(root.join("python/pyproject.toml")).unwrap_or_default();
    assert_eq!(
        release_of(&py, "RELEASE = \""),
        release_of(&pyproject, "version = \"")
    );
    let package = std::fs::read_to_string(root.join("node/package.json")).unwrap_or_default();
    assert_eq!(
        release_of(&node, "export const RELEASE = \""),
        release_of(&package, "\"version\": \"")
    );
    assert!(!release_of(&py, "RELEASE = \"").is_empty());
}
