//! Every fuzz target on stable: each file of its corpus (`fuzz/corpus/{target}/`, where
//! campaigns also save what they find), then generated cases — the corpus entries mutated
//! (bytes flipped, inserted, deleted, spliced, syntax characters planted) and random bytes —
//! from a fixed seed, so a failure reproduces. `HUBHOST_FUZZ_CASES` sets the number of
//! generated cases per target (default 400); `HUBHOST_FUZZ_SEED` changes the seed;
//! `HUBHOST_FUZZ_TARGET` runs one target only. A failing input is written to
//! `target/fuzz-failures/` to be added to the corpus (with `HUBHOST_FUZZ_DEBUG` set, every input
//! is written to `target/fuzz-last-input` before it runs, for one that aborts the process).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use hubhost_fuzz_targets::TARGETS;

/// xorshift64*: small, fast, and the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Characters the parsers split on or look for.
const PLANTS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b"=",
    b";",
    b"&",
    b"%",
    b"-1",
    b"0",
    b"9223372036854775807",
    b"null",
    b"true",
    b"\"\"",
    b"\\u0000",
    b"\\",
    b"\\\"",
    b"\\uD83D",
    b"\xff",
    b"\x00",
    b"SharedAccessKey=",
    b"Endpoint=sb://",
    b"amqp.annotation.x-opt-offset",
    b">=",
    b"00:00:",
];

fn mutate(rng: &mut Rng, corpus: &[Vec<u8>]) -> Vec<u8> {
    if corpus.is_empty() || rng.below(8) == 0 {
        let len = rng.below(256);
        return (0..len).map(|_| rng.next() as u8).collect();
    }
    let mut data = corpus[rng.below(corpus.len())].clone();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(data.len() + 1);
                let byte = rng.next() as u8;
                data.insert(i, byte);
            }
            2 if !data.is_empty() => {
                let i = rng.below(data.len());
                let n = 1 + rng.below((data.len() - i).min(16));
                data.drain(i..i + n);
            }
            3 => {
                let i = rng.below(data.len() + 1);
                let plant = PLANTS[rng.below(PLANTS.len())];
                data.splice(i..i, plant.iter().copied());
            }
            4 => {
                let other = &corpus[rng.below(corpus.len())];
                let cut = rng.below(data.len() + 1);
                let from = rng.below(other.len() + 1);
                data.truncate(cut);
                data.extend_from_slice(&other[from..]);
            }
            _ if !data.is_empty() => {
                let i = rng.below(data.len());
                data.truncate(i);
            }
            _ => {}
        }
    }
    data
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = workspace().join("fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

/// Runs `input` through `target`; on a panic, saves the input and fails with where it is.
fn run(name: &str, target: fn(&[u8]), input: &[u8], what: &str) {
    if std::env::var_os("HUBHOST_FUZZ_DEBUG").is_some() {
        // An input that aborts the process (out of memory) cannot be caught: keep each one.
        std::fs::write(workspace().join("target/fuzz-last-input"), input).unwrap();
    }
    if let Err(e) = catch_unwind(AssertUnwindSafe(|| target(input))) {
        let message = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        let dir = workspace().join("target/fuzz-failures");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("{name}-{:016x}", fnv(input)));
        std::fs::write(&file, input).unwrap();
        panic!(
            "target {name} failed on {what}: {message}\nThe input is in {} ({} bytes)",
            file.display(),
            input.len()
        );
    }
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[test]
fn every_target_holds_on_its_corpus_and_on_generated_cases() {
    let cases: usize = std::env::var("HUBHOST_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let seed: u64 = std::env::var("HUBHOST_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x0048_5542_484f_5354);
    // The panics the targets catch would otherwise each print a message.
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let outcome = catch_unwind(|| {
        let only = std::env::var("HUBHOST_FUZZ_TARGET").ok();
        for (name, target) in TARGETS {
            if only.as_deref().is_some_and(|only| only != *name) {
                continue;
            }
            let corpus = corpus(name);
            assert!(!corpus.is_empty(), "fuzz/corpus/{name} is empty");
            for (i, input) in corpus.iter().enumerate() {
                run(name, *target, input, &format!("corpus entry {i}"));
            }
            let mut rng = Rng(seed ^ fnv(name.as_bytes()) | 1);
            for case in 0..cases {
                let input = mutate(&mut rng, &corpus);
                run(name, *target, &input, &format!("generated case {case}"));
            }
            eprintln!(
                "{name}: {} corpus entries, {cases} generated cases",
                corpus.len()
            );
        }
    });
    std::panic::set_hook(quiet);
    if let Err(e) = outcome {
        let message = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!("{message}");
    }
}

#[test]
fn every_target_has_a_campaign_and_a_corpus() {
    let fuzz = workspace().join("fuzz");
    let manifest = std::fs::read_to_string(fuzz.join("Cargo.toml")).unwrap();
    for (name, _) in TARGETS {
        let source = std::fs::read_to_string(fuzz.join(format!("fuzz_targets/{name}.rs")))
            .unwrap_or_else(|e| panic!("fuzz/fuzz_targets/{name}.rs: {e}"));
        assert!(
            source.contains(&format!("hubhost_fuzz_targets::{name}(")),
            "fuzz/fuzz_targets/{name}.rs does not call its target"
        );
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "fuzz/Cargo.toml has no [[bin]] {name}"
        );
    }
}
