//! A configuration file's TOML error as it may be printed: the broker's own file
//! (`cli/file.rs`) and the bridge's mappings file (`bridge/mapping.rs`) both read TOML that may
//! hold a password, and toml's own message quotes the failing line.

/// A configuration file's TOML error as it may be printed: what is wrong and where (line and
/// column), without the line itself, which toml's own message quotes and which may hold a
/// password (`redis_url = "redis://:…@…`, `http_token = …`).
pub fn toml_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            // a span inside a character (it should not be) counts from the text's end
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |n| n + 1) + 1;
            format!("line {line}, column {column}: {}", e.message().trim())
        }
        None => e.message().trim().to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_toml_error_names_the_place_but_not_the_line() {
        let text = "namespace = \"x\"\nredis_url = \"redis://:s3cret@h:1\n";
        let e = toml::from_str::<toml::Table>(text).unwrap_err();
        let shown = super::toml_error(text, &e);
        assert!(shown.starts_with("line 2, column "), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}
