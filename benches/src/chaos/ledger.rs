//! The independent ledger: what the soak's workers did, written by the handler itself to a file
//! of the worker's own (never through Redis, so nothing the system under test writes can make
//! it agree), and the final check that compares it with the acknowledged submits and the
//! records.
//!
//! Each run of a handler writes `ran <id> <token>` before it returns its token as the job's
//! output (the token, `<pid>-<n>`, is unique to that run); each completion the server accepted
//! (fenced) writes `accepted <id> <token>`. A line is one `write` to a file opened for append,
//! so a SIGKILL loses at most the line not yet written, never half of one. The check: every
//! acknowledged job's record is `finished` (else lost); its output is a token the ledger shows
//! ran (else the record came from nowhere); and no job has two accepted completions, nor one
//! whose token is not the recorded one (else recorded twice).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use anyhow::{Context, Result};

/// A worker's side: appends its lines.
pub struct Ledger {
    file: Mutex<File>,
    pid: u32,
    runs: AtomicU64,
    /// The token each job's run returned, until its completion is accepted.
    tokens: Mutex<HashMap<String, String>>,
}

impl Ledger {
    pub fn open(path: &Path) -> Result<Ledger> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open the ledger {}", path.display()))?;
        Ok(Ledger {
            file: Mutex::new(file),
            pid: std::process::id(),
            runs: AtomicU64::new(0),
            tokens: Mutex::new(HashMap::new()),
        })
    }

    fn line(&self, text: &str) {
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        // one write per line: a kill cuts between lines, not inside one
        let _ = f.write_all(text.as_bytes());
    }

    /// A run of `id` ended: its token, to return as the job's output.
    pub fn ran(&self, id: &str) -> String {
        let token = format!("{}-{}", self.pid, self.runs.fetch_add(1, Ordering::Relaxed));
        self.line(&format!("ran {id} {token}\n"));
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), token.clone());
        token
    }

    /// The server accepted the completion of `id`'s last run here.
    pub fn accepted(&self, id: &str) {
        let token = self
            .tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)
            .unwrap_or_default();
        self.line(&format!("accepted {id} {token}\n"));
    }
}

/// Every worker's ledger of one soak, read back.
#[derive(Default)]
pub struct Book {
    /// Per job, the tokens of its runs.
    ran: HashMap<String, Vec<String>>,
    /// Per job, the tokens of its accepted completions.
    accepted: HashMap<String, Vec<String>>,
}

impl Book {
    /// Reads every `*.ledger` file in `dir`.
    pub fn read(dir: &Path) -> Result<Book> {
        let mut book = Book::default();
        for entry in std::fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))? {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("ledger") {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            for line in text.lines() {
                let mut w = line.split(' ');
                let (Some(what), Some(id), Some(token)) = (w.next(), w.next(), w.next()) else {
                    continue;
                };
                let to = match what {
                    "ran" => &mut book.ran,
                    "accepted" => &mut book.accepted,
                    _ => continue,
                };
                to.entry(id.to_string())
                    .or_default()
                    .push(token.to_string());
            }
        }
        Ok(book)
    }

    /// The tokens (`<pid>-<n>`) of every run of `id` the ledgers show.
    pub fn runs_of(&self, id: &str) -> &[String] {
        self.ran.get(id).map(Vec::as_slice).unwrap_or_default()
    }

    pub fn runs(&self) -> usize {
        self.ran.values().map(Vec::len).sum()
    }

    /// Judges one acknowledged job by its record's status and output.
    pub fn judge(&self, id: &str, status: Option<&str>, output: Option<&str>) -> Judgement {
        if status != Some("finished") {
            return Judgement::Lost;
        }
        let output = output.unwrap_or_default();
        let ran = self.ran.get(id).map(Vec::as_slice).unwrap_or_default();
        if !ran.iter().any(|t| t == output) {
            return Judgement::Unproven;
        }
        match self.accepted.get(id).map(Vec::as_slice).unwrap_or_default() {
            [] => Judgement::Once,
            [one] if one == output || one.is_empty() => Judgement::Once,
            _ => Judgement::Twice,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// Finished, by a run the ledger shows, accepted at most once.
    Once,
    /// Not finished.
    Lost,
    /// Two accepted completions, or an accepted one that is not what the record holds.
    Twice,
    /// Finished with an output no run in the ledger produced.
    Unproven,
}
