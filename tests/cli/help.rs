//! `hubhost --help` reads at a glance: one short line per command; each command's own `--help`
//! keeps its whole description.

/// The commands `hubhost --help` lists, with their lines.
fn command_lines(help: &str) -> Vec<&str> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect()
}

#[test]
fn the_top_help_gives_one_short_line_per_command() {
    for flag in ["--help", "-h"] {
        let (code, help, _) = hubhost_testkit::hubhost(&[flag], &[]);
        assert_eq!(code, 0);
        for line in help.lines() {
            assert!(line.len() <= 100, "{} characters: {line}", line.len());
        }
        let commands = command_lines(&help);
        assert!(commands.len() >= 12, "{help}");
        for line in commands {
            assert!(line.len() <= 80, "{} characters: {line}", line.len());
        }
    }
    for group in ["checkpoints", "hub"] {
        let (code, help, _) = hubhost_testkit::hubhost(&[group, "--help"], &[]);
        assert_eq!(code, 0);
        for line in command_lines(&help) {
            assert!(line.len() <= 80, "hubhost {group}: {line}");
        }
    }
}

#[test]
fn a_commands_own_help_keeps_its_whole_description() {
    let (_, short, _) = hubhost_testkit::hubhost(&["--help"], &[]);
    let (code, long, _) = hubhost_testkit::hubhost(&["rehearse", "--help"], &[]);
    assert_eq!(code, 0);
    assert!(short.contains("Run the app under Azure's faults and audit its outputs"));
    // The details the top page leaves out are under the command's own --help.
    for detail in ["the handler killed", "--simulate", "byte for byte"] {
        assert!(long.contains(detail), "no {detail:?} in:\n{long}");
        assert!(!short.contains(detail));
    }
}
