//! What hubhost's executables (`hubhost`, `hubhost-app`, `hubhost-bench`) share as processes,
//! at the ground floor of the workspace: no crate of ours below it.
//!
//! - [`child`]: child processes that never outlive their parent, and loopback ports for them
//!   to listen on that no outgoing connection takes first;
//! - [`progress`]: progress lines for long-running commands;
//! - [`allocator`]: the memory allocator, and its opt-out of transparent huge pages;
//! - [`positive_seconds`]: the parser of the command lines' duration flags.

pub mod allocator;
pub mod child;
pub mod progress;

/// A command-line duration: a positive number of seconds, fractions allowed (`--scale-interval
/// 0.5`); `value_parser = positive_seconds` in a clap argument.
pub fn positive_seconds(text: &str) -> Result<std::time::Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0)
        .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
        .ok_or(format!("{text:?} is not a positive number of seconds"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_positive_seconds() {
        assert_eq!(
            positive_seconds("0.5"),
            Ok(std::time::Duration::from_millis(500))
        );
        assert_eq!(
            positive_seconds("90"),
            Ok(std::time::Duration::from_secs(90))
        );
        for bad in ["0", "-1", "x", "NaN", "inf", "1e400"] {
            assert!(positive_seconds(bad).is_err(), "{bad}");
        }
    }
}
