//! Human output of the operator's commands: a table with a header, left-aligned text and
//! right-aligned numbers, sized to its content.

/// `text` as a terminal may show it: each control character other than a newline or a tab (an
/// escape sequence that would recolour, move the cursor or retitle the terminal) and each
/// bidirectional control (which reorders what follows) written as `U+XXXX`, so text a job or
/// its worker wrote cannot act on the operator's terminal.
pub(super) fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    let odd = |c: char| {
        (c.is_control() && !matches!(c, '\n' | '\t'))
            || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
            || matches!(
                c,
                '\u{2028}' | '\u{2029}' | '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}'
            )
    };
    if !text.contains(odd) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if odd(c) {
            out.push_str(&format!("U+{:04X}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A column: its header and whether its values are numbers (right-aligned).
pub(super) struct Column {
    pub header: &'static str,
    pub numeric: bool,
}

pub(super) const fn text(header: &'static str) -> Column {
    Column {
        header,
        numeric: false,
    }
}

pub(super) const fn num(header: &'static str) -> Column {
    Column {
        header,
        numeric: true,
    }
}

/// Renders rows under their columns, two spaces apart.
pub(super) fn render(columns: &[Column], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| shown(c).into_owned()).collect())
        .collect();
    let rows = &rows;
    let mut widths: Vec<usize> = columns.iter().map(|c| c.header.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, ((c, w), cell)) in columns.iter().zip(&widths).zip(cells).enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            let pad = w.saturating_sub(cell.chars().count());
            if c.numeric {
                out.push_str(&" ".repeat(pad));
                out.push_str(cell);
            } else {
                out.push_str(cell);
                if i + 1 < columns.len() {
                    out.push_str(&" ".repeat(pad));
                }
            }
        }
        out.trim_end().to_string()
    };
    let mut out = line(columns.iter().map(|c| c.header).collect());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// A duration in ms as a person reads it: `850ms`, `12s`, `4m`, `3h`.
pub(super) fn ms(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{}s", ms / 1000),
        60_000..=3_599_999 => format!("{}m", ms / 60_000),
        _ => format!("{}h", ms / 3_600_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_align_right_and_text_left() {
        let out = render(
            &[text("QUEUE"), num("WAITING")],
            &[
                vec!["osis".into(), "5".into()],
                vec!["v/io".into(), "120".into()],
            ],
        );
        assert_eq!(out, "QUEUE  WAITING\nosis         5\nv/io       120\n");
        assert_eq!(ms(850), "850ms");
        assert_eq!(ms(12_500), "12s");
    }
}
