//! `expect.bodyRegex`: a pattern compiled once per probe, matched against
//! at most 10 KiB of body within the probe's deadline.
//!
//! The regex crate's `Regex` bounds memory but not time: once its lazy DFA
//! thrashes it falls back to a simulation whose cost is the program's size
//! times the body's, and it cannot be interrupted. A 256 KiB program took
//! 0.4 s per 10 KiB body in release (1.4 s on a loaded node), past a 1 s
//! timeout, on a runtime worker shared by every probe of the node. So the
//! pattern compiles to a Thompson NFA of at most [`MAX_COMPILED_REGEX_BYTES`]
//! and is only ever searched by a lazy DFA ([`hybrid::dfa::DFA`]) that
//! *gives up* rather than falling back: after [`CACHE_CLEARS_BEFORE_GIVING_UP`]
//! clears of its [`MAX_REGEX_DFA_BYTES`] cache while making little progress
//! per state, the search stops and the probe fails saying so. The search
//! runs in slices ([`Search::step`]) so the caller can check its deadline
//! and yield between them. Worst case measured (`bench/RESULTS.md`,
//! "bodyRegex"): about 15 ms of CPU per 10 KiB body in release.

use regex_automata::hybrid::LazyStateID;
use std::sync::Arc;

use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::nfa::thompson;
use regex_automata::util::syntax;
use regex_automata::{Input, MatchKind};

/// The most heap a `bodyRegex`'s compiled program (its NFA) may take; a
/// pattern over it is refused. The lazy DFA's work per body byte is at most
/// proportional to it.
pub const MAX_COMPILED_REGEX_BYTES: usize = 64 * 1024;

/// The most memory one search's lazy DFA cache may take (allocated per
/// search and freed after it).
pub const MAX_REGEX_DFA_BYTES: usize = 256 * 1024;

/// Cache clears a search tolerates, when each state it built served fewer
/// than [`MIN_BYTES_PER_STATE`] bytes, before giving up.
const CACHE_CLEARS_BEFORE_GIVING_UP: usize = 3;

/// Below this many body bytes searched per DFA state built, a cache clear
/// counts as thrashing.
const MIN_BYTES_PER_STATE: usize = 10;

/// `expect.bodyRegex` compiled; two are equal when their patterns are.
#[derive(Debug, Clone)]
pub struct BodyRegex {
    pattern: String,
    /// Shared: a DFA's configuration alone is most of a kilobyte, and every
    /// probe spec is cloned into its worker.
    dfa: Arc<DFA>,
    compiled_bytes: usize,
}

/// Why a pattern does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    #[error("not a valid regex: {0}")]
    Syntax(String),
    #[error("compiles to more than {0} bytes")]
    TooBig(usize),
}

impl BodyRegex {
    pub fn new(pattern: &str) -> Result<BodyRegex, CompileError> {
        let hir = syntax::parse(pattern).map_err(|e| CompileError::Syntax(syntax_reason(&e)))?;
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .nfa_size_limit(Some(MAX_COMPILED_REGEX_BYTES))
                    // Only "is there a match" is asked: no capture slots.
                    .which_captures(thompson::WhichCaptures::None),
            )
            .build_from_hir(&hir)
            .map_err(|_| CompileError::TooBig(MAX_COMPILED_REGEX_BYTES))?;
        let compiled_bytes = nfa.memory_usage();
        let dfa = DFA::builder()
            .configure(
                DFA::config()
                    .match_kind(MatchKind::All)
                    .cache_capacity(MAX_REGEX_DFA_BYTES)
                    .minimum_cache_clear_count(Some(CACHE_CLEARS_BEFORE_GIVING_UP))
                    .minimum_bytes_per_state(Some(MIN_BYTES_PER_STATE))
                    // A lazy DFA cannot decide a Unicode `\b` on non-ASCII
                    // bytes; it stops there instead (see `Verdict`).
                    .unicode_word_boundary(true),
            )
            .build_from_nfa(nfa)
            // The only build error left is a cache too small for the NFA's
            // states, which the size limit keeps from happening; say so
            // rather than panic if it ever does.
            .map_err(|_| CompileError::TooBig(MAX_COMPILED_REGEX_BYTES))?;
        Ok(BodyRegex {
            pattern: pattern.to_string(),
            dfa: Arc::new(dfa),
            compiled_bytes,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Heap held by the compiled program, charged to the pod's budget.
    pub fn compiled_bytes(&self) -> usize {
        self.compiled_bytes
    }

    /// A search for a match anywhere in `body`.
    pub fn search<'a>(&'a self, body: &'a [u8]) -> Search<'a> {
        let mut cache = self.dfa.create_cache();
        let state = self
            .dfa
            .start_state_forward(&mut cache, &Input::new(body))
            .map_err(|_| GaveUp::Costly);
        Search {
            dfa: &self.dfa,
            cache,
            state,
            body,
            at: 0,
        }
    }

    /// The whole search at once; probes search by slices under a deadline.
    #[cfg(test)]
    pub fn is_match(&self, body: &str) -> Result<bool, GaveUp> {
        let mut search = self.search(body.as_bytes());
        loop {
            if let Some(verdict) = search.step(usize::MAX) {
                return verdict;
            }
        }
    }
}

impl PartialEq for BodyRegex {
    fn eq(&self, other: &Self) -> bool {
        self.pattern == other.pattern
    }
}

impl Eq for BodyRegex {}

/// Why a search stopped without a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GaveUp {
    /// The lazy DFA thrashed its cache: this pattern on this body costs
    /// more than a probe may spend.
    #[error("too costly to match against this body")]
    Costly,
    /// A Unicode `\b` met a non-ASCII byte (`(?-u:\b)` is the ASCII one).
    #[error("a Unicode word boundary met a non-ASCII byte")]
    UnicodeWordBoundary,
    /// The probe's deadline passed first (the searcher's caller decides).
    #[error("the probe's timeout passed first")]
    Timeout,
}

/// One search in progress; [`Search::step`] advances it.
pub struct Search<'a> {
    dfa: &'a DFA,
    cache: Cache,
    state: Result<LazyStateID, GaveUp>,
    body: &'a [u8],
    at: usize,
}

impl Search<'_> {
    /// Feeds the DFA up to `bytes` more body bytes; `Some` once the verdict
    /// is known (match, no match, or given up).
    pub fn step(&mut self, bytes: usize) -> Option<Result<bool, GaveUp>> {
        let mut state = match self.state {
            Ok(state) => state,
            Err(gave_up) => return Some(Err(gave_up)),
        };
        let end = self.body.len().min(self.at.saturating_add(bytes));
        while self.at < end {
            state = match self
                .dfa
                .next_state(&mut self.cache, state, self.body[self.at])
            {
                Ok(next) => next,
                Err(_) => return Some(Err(GaveUp::Costly)),
            };
            self.at += 1;
            // DFA matches are reported one byte late; any match state means
            // a match ended before this byte, which is all `is_match` asks.
            if state.is_tagged() {
                if state.is_match() {
                    return Some(Ok(true));
                }
                if state.is_dead() {
                    return Some(Ok(false));
                }
                if state.is_quit() {
                    return Some(Err(GaveUp::UnicodeWordBoundary));
                }
            }
        }
        if self.at < self.body.len() {
            self.state = Ok(state);
            return None;
        }
        Some(match self.dfa.next_eoi_state(&mut self.cache, state) {
            Ok(last) => Ok(last.is_match()),
            Err(_) => Err(GaveUp::Costly),
        })
    }
}

/// regex-syntax's errors span lines (the pattern, a caret, then
/// `error: ...`); field errors are one line.
fn syntax_reason(error: &impl std::fmt::Display) -> String {
    let text = error.to_string();
    match text.lines().find_map(|line| line.strip_prefix("error: ")) {
        Some(reason) => reason.to_string(),
        None => text.replace('\n', " "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_ab(len: usize) -> String {
        let mut state: u64 = 12345;
        (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                if (state >> 33) & 1 == 0 { 'a' } else { 'b' }
            })
            .collect()
    }

    #[test]
    fn matches_anywhere_with_anchors_and_classes() {
        let re = BodyRegex::new(r#"^\{"status":"UP""#).unwrap();
        assert_eq!(re.is_match(r#"{"status":"UP"}"#), Ok(true));
        assert_eq!(re.is_match(r#" {"status":"UP"}"#), Ok(false));
        let re = BodyRegex::new("OK$").unwrap();
        assert_eq!(re.is_match("all OK"), Ok(true));
        assert_eq!(re.is_match("OK then"), Ok(false));
        assert_eq!(BodyRegex::new("").unwrap().is_match(""), Ok(true));
        let re = BodyRegex::new(r"ready: \d+/\d+").unwrap();
        assert_eq!(re.is_match("pods ready: 3/3, ok"), Ok(true));
        assert_eq!(re.is_match("pods ready: x/3"), Ok(false));
    }

    #[test]
    fn unicode_word_boundary_on_ascii_works_and_gives_up_on_other_bytes() {
        let re = BodyRegex::new(r"\bup\b").unwrap();
        assert_eq!(re.is_match("all up now"), Ok(true));
        assert_eq!(re.is_match("setup"), Ok(false));
        assert_eq!(re.is_match("é up"), Err(GaveUp::UnicodeWordBoundary));
        let ascii = BodyRegex::new(r"(?-u:\b)up(?-u:\b)").unwrap();
        assert_eq!(ascii.is_match("é up"), Ok(true));
    }

    #[test]
    fn steps_resume_where_they_stopped() {
        let re = BodyRegex::new("needle").unwrap();
        let body = format!("{}needle", "x".repeat(5000));
        let mut search = re.search(body.as_bytes());
        let mut steps = 0;
        let verdict = loop {
            steps += 1;
            if let Some(verdict) = search.step(100) {
                break verdict;
            }
        };
        assert_eq!(verdict, Ok(true));
        assert_eq!(steps, 51, "5,006 bytes in slices of 100");
    }

    #[test]
    fn programs_over_the_limit_are_refused() {
        // The pattern the fair-share issue measured at 1.44 s per body.
        assert_eq!(
            BodyRegex::new("(?:a*b*){1500}[^ab]").unwrap_err(),
            CompileError::TooBig(MAX_COMPILED_REGEX_BYTES)
        );
        assert_eq!(
            BodyRegex::new(r"(\w{100}){100}").unwrap_err(),
            CompileError::TooBig(MAX_COMPILED_REGEX_BYTES)
        );
        assert_eq!(
            BodyRegex::new("(unclosed").unwrap_err(),
            CompileError::Syntax("unclosed group".to_string())
        );
        let near = BodyRegex::new("(?:a*b*){320}[^ab]").unwrap();
        assert!(near.compiled_bytes() <= MAX_COMPILED_REGEX_BYTES);
    }

    #[test]
    fn a_thrashing_search_gives_up_instead_of_falling_back() {
        // Every position may end the k-th-from-last `a`: 2^200 DFA states.
        let re = BodyRegex::new("[ab]*a[ab]{200}c").unwrap();
        assert_eq!(re.is_match(&random_ab(10 * 1024)), Err(GaveUp::Costly));
        // The largest program allowed, on the body that makes it work
        // hardest, finishes (its states fit the cache).
        let near = BodyRegex::new("(?:a*b*){320}[^ab]").unwrap();
        assert_eq!(near.is_match(&random_ab(10 * 1024)), Ok(false));
    }
}
