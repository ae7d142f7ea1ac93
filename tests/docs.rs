//! The commands the README and docs/ tell a user to type, run exactly as written, from the folder
//! the docs imply, with what a user has: hubhost installed with `cargo install --locked`, a
//! project made by `hubhost new` with the lock it writes and a target folder of its own, no
//! `CARGO_TARGET_DIR`, relative paths, the documented default ports.
//!
//! `every_documented_command_is_run_by_a_scenario_or_excused` reads every fenced shell block of
//! README.md and docs/*.md: each command must belong to a scenario below or to [`NOT_RUN`], with
//! the reason it cannot run here. A scenario runs only commands of its own list, and must run
//! all of them; so a doc edit that changes a command fails this test until a scenario runs the
//! new one, and a scenario that stops running a command fails too.
//!
//! Where a command runs:
//! - the five-minute path, in a temporary folder outside the checkout, as a user's projects are;
//! - the installs, from the checkout's root (`--path .`), into a temporary root, building in the
//!   workspace's target folder so `cargo run --release` reuses the build (`CARGO_TARGET_DIR` is
//!   where `cargo install` builds; the commands are unchanged);
//! - every other command the docs give "from the repository root", from a folder inside the
//!   checkout (`target/docs/…`) that stands in for it: Cargo finds the workspace from there as
//!   from the root, `target` there is the checkout's, and `function_app/`, `examples/*/
//!   function_app/` and `local.settings.json.example` are copies, so what the commands write
//!   (`hubhost-data/`, `app.zip`, a copied executable) stays out of the checkout's own files.
//!
//! The commands use the fixed ports the docs name (5672, 5671, 5443, 9092, 5380, 7071, 6671), so
//! the scenarios take turns on them with every other test of the machine that wants one (the
//! test kit's `hold_fixed_ports`), each first waiting until they are free; what needs no port
//! (a new project's first `cargo test`, packaging) runs meanwhile.
//!
//! The release profile is built quickly here (the test kit's `QUICK_RELEASE` settings in the
//! shells' environment: opt-level 0, no link-time optimization, 16 codegen units; the commands
//! unchanged): the installs and `cargo run --release` then build in a fraction of the time, and
//! nothing they check depends on optimization (the rest of the suite runs unoptimized builds too;
//! the benchmarks build the real profile). `hubhost package` builds with the full profile, as a
//! user's does: the reference app's package is tests/cli/package.rs's build, reused.

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use hubhost_testkit::{self as kit, Tool};
use serde_json::Value;

/// The installs (README, "Install"), from the checkout's root.
const INSTALL: &[&str] = &[
    "cargo install --locked --path .",
    "cargo install --locked --path crates/app",
];

/// The README's first command, from the repository root.
const FIRST_COMMAND: &[&str] = &["cargo run --release -- demo"];

/// "Your own function in five minutes" (README), the new project's own README, and the
/// checkpoints of that project (docs/checkpoints.md).
const FIVE_MINUTES: &[&str] = &[
    "hubhost new my-function --function CountEvents --event-hub sensors",
    "cd my-function",
    "cargo test",
    "hubhost invoke CountEvents --events events.json",
    "hubhost hub",
    "hubhost emulate --app function_app --watch",
    "hubhost simulate --hub sensors --homes 100 --duration 20",
    "hubhost checkpoints list --namespace localhost --hub sensors",
    "hubhost package --app function_app --out app.zip",
];

/// docs/hub.md, from the repository root.
const HUB: &[&str] = &[
    "cargo run --release -- hub",
    "cargo run --release -- hub --hub orders:4:audit --hub sensors:16:archive --in-memory",
    "cargo run --release -- hub --config Config.json",
    "cargo run --release -- hub --tls",
    "cargo run --release -- hub --websocket",
    "cargo run --release -- hub --tls --websocket",
    "cargo run --release -- hub --tls-port 6671 --tls-cert my.pem --tls-key my.key",
    "cargo run --release -- simulate",
    "cargo run --release -- simulate --homes 2000 --speed-up 60 --minutes 10",
    "cargo run --release -- simulate --rate 5000 --duration 10",
    "cargo run --release -- simulate --unthrottled --events 100000 --json",
];

/// docs/running.md, from the repository root: preparing `func start`, and the trigger locally.
const RUNNING: &[&str] = &[
    "cargo build --release -p hubhost-app && cp target/release/hubhost-app function_app/",
    "cp local.settings.json.example function_app/local.settings.json",
    "hubhost hub",
    "hubhost simulate --homes 1000 --speed-up 10",
    "hubhost emulate --app function_app",
    "hubhost emulate --scale --app function_app --scale-interval 5 --scale-in-hold 30",
    "hubhost package --out app.zip",
];

/// docs/writing-functions.md's examples, from the repository root, beside a hub and readings.
const EXAMPLES: &[&str] = &[
    "hubhost hub",
    "hubhost simulate --hub sensors --homes 100 --duration 20",
    "cargo build -p count-readings && hubhost emulate --app examples/count-readings/function_app",
    "cargo build -p forward-alarms && hubhost emulate --app examples/forward-alarms/function_app",
    "cargo build -p home-limits && hubhost emulate --app examples/home-limits/function_app",
];

/// docs/testing.md's simulated rehearsal, from the example's folder: a naive forwarder's seed,
/// its duplicates, the plan shrunk and the command that replays it.
const REHEARSE: &[&str] = &[
    "cd examples/forward-events",
    "hubhost rehearse --simulate --handler ../../target/debug/forward-naive --count 300 --fault-count 10 --seed 7",
];

/// Documented commands no scenario runs, and why.
const NOT_RUN: &[(&str, &str)] = &[
    (
        "HUBHOST_SIMULATED_SEEDS=1000 cargo test --release -p forward-events --test simulation",
        "a thousand seeds of a long form; the suite runs the same test with 200 seeds",
    ),
    (
        "cargo build --release --workspace && HUBHOST_SIMULATED_SEEDS=1000 cargo test --release --test pipeline rehearsal::the_reference_app_simulated",
        "a thousand seeds of a long form (about four minutes); the suite runs the same test with 8 seeds",
    ),
    (
        "scripts/bench-brokers.sh",
        "a side-by-side of about 12 minutes with two JVM servers; its short form runs in tests/clients/side_by_side.rs",
    ),
    (
        "REPS=1 RECORDS=300000 scripts/bench-brokers.sh",
        "the same side-by-side, longer; its short form runs in tests/clients/side_by_side.rs",
    ),
    (
        "./target/release/hubhost bench rehearse",
        "a benchmark of minutes; crates/bench/tests/bench_rehearse.rs runs its short form",
    ),
    (
        "HUBHOST_REHEARSAL_FAULTS=120 cargo test --test pipeline rehearsal::the_reference_app",
        "the long rehearsal (about two minutes); tests/pipeline/rehearsal.rs runs the same test with 24 faults in the suite",
    ),
    (
        "scripts/test.sh",
        "the suite itself: .ci/run runs this very command, and this test is part of it",
    ),
    (
        "rm -rf /tmp/fresh && git clone -q . /tmp/fresh && cd /tmp/fresh && CI=true bash .ci/run > LOG 2>&1",
        "CI itself from a fresh clone: CI runs .ci/run on a clean checkout, and this test is part of it",
    ),
    (
        "awk '/\\| +Running /{t[$1]=$4} /\\| test result/{print $1, $NF, t[$1]}' LOG | sort -k2 -rn",
        "reads the log of the fresh-clone run above, which no scenario makes",
    ),
    (
        "cargo install cargo-zigbuild && pip install ziglang",
        "installs two tools into the user's own Cargo and Python; scripts/install-test-tools.sh installs the same two (pinned) under .tools/, which the scenarios put on PATH",
    ),
    (
        "az deployment group create -g RG --template-file azuredeploy.json --parameters appName=NAME",
        "needs an Azure subscription; tests/cli/deploy_template.rs checks the template",
    ),
    (
        "az deployment group create -g RG --template-file deploy/azuredeploy.json --parameters appName=NAME",
        "needs an Azure subscription; tests/cli/deploy_template.rs checks the template",
    ),
    (
        "az functionapp deployment source config-zip -g RG -n NAME --src app.zip",
        "needs an Azure subscription; the zip it deploys is made and checked by the scenarios",
    ),
    (
        "cd function_app && func start",
        "Azure Functions Core Tools do not install here (Microsoft's package feed is out of reach); the two commands before it run",
    ),
    (
        "EventHubConnection='Endpoint=sb://myns.servicebus.windows.net/;SharedAccessKeyName=…;SharedAccessKey=…' cargo run --release -- simulate --hub sensors",
        "a real event hub: needs an Azure namespace; the same command against the local hub runs",
    ),
    (
        "cargo build --release --workspace",
        "the benchmarks' build (docs/benchmarks.md): the installs build the same executables",
    ),
    (
        "./target/release/hubhost bench startup --starts 20 --executable \"hubhost-app=target/x86_64-unknown-linux-gnu/release/hubhost-app\" --executable \"before=/path/to/an/earlier/hubhost serve\"",
        "a benchmark against an earlier build of the user's; `bench startup` runs small in crates/bench/tests",
    ),
    (
        "./target/release/hubhost bench handler --repetitions 5",
        "a benchmark of minutes; its short form runs in crates/bench/tests/bench_handler.rs",
    ),
    (
        "./target/release/hubhost bench pool --throughput-only --repeat 3",
        "a benchmark of about 10 minutes; its short form runs in crates/bench/tests/bench_pool.rs",
    ),
    (
        "./target/release/hubhost bench pool --throughput-only --tracing --repeat 3 --pools 1,4",
        "a benchmark of about 4 minutes; its short form runs in crates/bench/tests/bench_pool.rs",
    ),
    (
        "./target/release/hubhost bench pool --steady-seconds 120",
        "a benchmark of about 15 minutes; its short form runs in crates/bench/tests/bench_pool.rs",
    ),
    (
        "./target/release/hubhost bench latency",
        "a benchmark of about 14 minutes; its short form runs in crates/bench/tests/bench_latency_cost.rs",
    ),
    (
        "./target/release/hubhost bench soak",
        "an hour's soak; its five-minute form runs in crates/bench/tests/bench_soak.rs",
    ),
    (
        "./target/release/hubhost bench cost",
        "a benchmark of about 11 minutes; its short form runs in crates/bench/tests/bench_latency_cost.rs",
    ),
    (
        "./target/release/hubhost bench cost --configs hubhost --min-batch 90 --max-wait 1",
        "a benchmark of minutes; its short form runs in crates/bench/tests/bench_latency_cost.rs",
    ),
    (
        "./target/release/hubhost bench chaos",
        "about 45 minutes of faults; the short form runs in crates/bench/tests/chaos.rs",
    ),
    (
        "./target/release/hubhost bench chaos --faults 12 --outage 10,15 --stores directory",
        "the chaos rig's short run; crates/bench/tests/chaos.rs runs it with 12 faults on both stores",
    ),
    (
        "./target/release/hubhost bench hub",
        "a benchmark of minutes; its short form runs in crates/bench/tests",
    ),
    (
        "./target/release/hubhost bench kafka",
        "a benchmark of minutes; its short form runs in crates/bench/tests/bench_kafka.rs",
    ),
    (
        "scripts/bench-checkpoints.sh",
        "a benchmark; `bench checkpoints` is measured by it, not tested",
    ),
    (
        "./target/release/hubhost bench checkpoints --storage <dir|conn string|memory:> ...",
        "a synopsis with placeholders",
    ),
];

// ---------------------------------------------------------------------------------------------
// The documents

/// A command a document tells the user to type: its text (continued lines joined, its comment
/// left out) and where it is.
#[derive(Debug, Clone)]
struct Documented {
    text: String,
    place: String,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

fn documented() -> Vec<Documented> {
    documents()
        .iter()
        .flat_map(|path| {
            let name = path.strip_prefix(repo()).unwrap().display().to_string();
            commands_in(&std::fs::read_to_string(path).unwrap(), &name)
        })
        .collect()
}

/// The commands of a markdown text's fenced `bash`/`sh` blocks.
fn commands_in(markdown: &str, file: &str) -> Vec<Documented> {
    let mut out = Vec::new();
    let mut shell: Option<bool> = None;
    let mut pending = String::new();
    let mut pending_line = 0;
    for (i, line) in markdown.lines().enumerate() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            shell = match shell {
                Some(_) => None,
                None => Some(matches!(info.trim(), "bash" | "sh" | "shell" | "console")),
            };
            continue;
        }
        if shell != Some(true) {
            continue;
        }
        let mut code = without_comment(line);
        if pending.is_empty() {
            pending_line = i + 1;
        } else {
            code = code.trim_start();
        }
        match code.strip_suffix('\\') {
            Some(continued) => {
                pending.push_str(continued.trim());
                pending.push(' ');
            }
            None => {
                pending.push_str(code);
                let text = pending.trim().to_string();
                pending.clear();
                if !text.is_empty() {
                    out.push(Documented {
                        text,
                        place: format!("{file}:{pending_line}"),
                    });
                }
            }
        }
    }
    out
}

/// A shell line without its comment: from a `#` that starts a word outside quotes.
fn without_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if previous.is_whitespace() => return line[..i].trim_end(),
            _ => {}
        }
        previous = c;
    }
    line.trim_end()
}

/// Every scenario's commands.
fn scenarios() -> Vec<(&'static str, &'static [&'static str])> {
    vec![
        ("INSTALL", INSTALL),
        ("FIRST_COMMAND", FIRST_COMMAND),
        ("FIVE_MINUTES", FIVE_MINUTES),
        ("HUB", HUB),
        ("RUNNING", RUNNING),
        ("EXAMPLES", EXAMPLES),
        ("REHEARSE", REHEARSE),
    ]
}

#[test]
fn every_documented_command_is_run_by_a_scenario_or_excused() {
    let documented = documented();
    assert!(documented.len() > 40, "{documented:#?}");
    let run: BTreeSet<&str> = scenarios()
        .iter()
        .flat_map(|(_, commands)| commands.iter().copied())
        .collect();
    let excused: BTreeSet<&str> = NOT_RUN.iter().map(|(command, _)| *command).collect();
    let orphans: Vec<String> = documented
        .iter()
        .filter(|d| !run.contains(d.text.as_str()) && !excused.contains(d.text.as_str()))
        .map(|d| format!("{}: {}", d.place, d.text))
        .collect();
    assert!(
        orphans.is_empty(),
        "documented commands that no scenario runs and NOT_RUN does not excuse (run them in a scenario of tests/docs.rs, or say why not):\n{}",
        orphans.join("\n")
    );
    let texts: BTreeSet<&str> = documented.iter().map(|d| d.text.as_str()).collect();
    let stale: Vec<&&str> = run
        .union(&excused)
        .filter(|c| !texts.contains(**c))
        .collect();
    assert!(
        stale.is_empty(),
        "commands of tests/docs.rs that no document has any longer: {stale:#?}"
    );
    let both: Vec<&&str> = run.intersection(&excused).collect();
    assert!(both.is_empty(), "both run and excused: {both:#?}");
    for (_, reason) in NOT_RUN {
        assert!(reason.len() > 20, "say why: {reason}");
    }
}

#[test]
fn commands_are_read_from_fenced_shell_blocks_only() {
    let markdown = "text `hubhost inline`\n```bash\nhubhost a   # a comment\n\n# only a comment\nhubhost b \\\n  --flag x\necho '#not a comment' # but this is\n```\n```text\nhubhost synopsis <X>\n```\n```sh\nhubhost c\n```\n";
    let texts: Vec<String> = commands_in(markdown, "f.md")
        .into_iter()
        .map(|d| d.text)
        .collect();
    assert_eq!(
        texts,
        [
            "hubhost a",
            "hubhost b --flag x",
            "echo '#not a comment'",
            "hubhost c"
        ]
    );
    assert_eq!(commands_in(markdown, "f.md")[1].place, "f.md:6");
}

// ---------------------------------------------------------------------------------------------
// Running commands as a user's shell does

/// The release profile built quickly, for the builds that do not package (see the module's
/// documentation).
const QUICK_RELEASE: &[(&str, &str)] = kit::tools::QUICK_RELEASE;

/// The fixed ports the documented commands use.
const DEFAULT_PORTS: &[u16] = &[5672, 5671, 5443, 9092, 5380, 7071, 6671];

/// The documented ports, for one scenario at a time (of this binary or of another test binary
/// running beside it); free, or the scenario cannot run.
fn default_ports() -> kit::FixedPorts {
    kit::hold_fixed_ports(DEFAULT_PORTS)
}

/// The workspace's target folder: where this test's own build is.
fn workspace_target() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_hubhost"))
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .to_path_buf()
}

fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "waited {within:?} for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A shell for one scenario: runs its documented commands, each through `bash -c`, in its
/// current folder, and remembers which it ran.
struct Shell {
    name: &'static str,
    script: &'static [&'static str],
    dir: PathBuf,
    env: Vec<(String, String)>,
    logs: PathBuf,
    ran: BTreeSet<&'static str>,
}

impl Shell {
    /// A shell with the environment of a user who has hubhost installed in `installed` (and
    /// cargo-zigbuild and Zig, from .tools/): no variable of this test run's that would change
    /// what the commands do.
    fn user(
        name: &'static str,
        script: &'static [&'static str],
        dir: &Path,
        installed: &Path,
    ) -> Self {
        let tools = repo().join(".tools");
        let target = workspace_target();
        let system: Vec<PathBuf> =
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .filter(|p| !p.starts_with(&target) && !p.starts_with(repo()))
                .collect();
        let path = std::env::join_paths(
            [installed.join("bin"), tools.join("zig-venv/bin")]
                .into_iter()
                .chain(system),
        )
        .unwrap();
        let logs = target.join("docs/logs").join(name);
        let _ = std::fs::remove_dir_all(&logs);
        std::fs::create_dir_all(&logs).unwrap();
        Shell {
            name,
            script,
            dir: dir.to_path_buf(),
            env: std::iter::once(("PATH".into(), path.into_string().unwrap()))
                .chain(
                    QUICK_RELEASE
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string())),
                )
                .collect(),
            logs,
            ran: BTreeSet::new(),
        }
    }

    /// Runs `text`, which must succeed, with the release profile as the project sets it (for
    /// `hubhost package` as a user types it); its stdout and stderr.
    fn ok_full_profile(&mut self, text: &str, limit: Duration) -> (String, String) {
        self.ok_with_profile(&[], text, limit)
    }

    /// Runs `text` with `settings` as the release profile's variables, in place of the shell's.
    fn ok_with_profile(
        &mut self,
        settings: &[(&str, &str)],
        text: &str,
        limit: Duration,
    ) -> (String, String) {
        let shell_env = self.env.clone();
        self.env
            .retain(|(key, _)| !key.starts_with("CARGO_PROFILE_"));
        self.env
            .extend(settings.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let out = self.ok_with_stderr(text, limit);
        self.env = shell_env;
        out
    }

    fn set(&mut self, key: &str, value: &Path) {
        self.env.push((key.into(), value.display().to_string()));
    }

    fn take(&mut self, text: &str) -> &'static str {
        let command = self
            .script
            .iter()
            .find(|c| **c == text)
            .unwrap_or_else(|| panic!("{text:?} is not a command of {}", self.name));
        self.ran.insert(command);
        command
    }

    fn command(&self, text: &str) -> Command {
        let mut command = Command::new("bash");
        command.arg("-c").arg(text).current_dir(&self.dir);
        for (key, _) in std::env::vars() {
            let ours = kit::set_by_cargo_test(&key)
                || key.starts_with("HUBHOST_")
                || key.starts_with("CARGO_PROFILE_")
                || key.starts_with("EventHubConnection")
                || key.starts_with("AzureWebJobsStorage")
                || matches!(
                    key.as_str(),
                    "CARGO_TARGET_DIR"
                        | "CARGO_BUILD_TARGET_DIR"
                        | "RUST_LOG"
                        | "CARGO_INSTALL_ROOT"
                );
            if ours {
                command.env_remove(key);
            }
        }
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command.stdin(Stdio::null());
        command
    }

    /// Runs `text` to its end within `limit`; its output.
    fn run(&mut self, text: &str, limit: Duration) -> Output {
        let command = self.take(text);
        let started = Instant::now();
        let out = kit::output_within(&mut self.command(command), limit);
        eprintln!(
            "[{}] `{command}` in {}: {} after {:.1} s",
            self.name,
            self.dir.display(),
            out.status,
            started.elapsed().as_secs_f64()
        );
        out
    }

    /// Runs `text`, which must succeed; its stdout.
    fn ok(&mut self, text: &str, limit: Duration) -> String {
        self.ok_with_stderr(text, limit).0
    }

    /// Runs `text`, which must succeed; its stdout and stderr.
    fn ok_with_stderr(&mut self, text: &str, limit: Duration) -> (String, String) {
        let out = self.run(text, limit);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(
            out.status.success(),
            "`{text}` in {} failed ({}):\n{stdout}\n{stderr}",
            self.dir.display(),
            out.status,
        );
        (stdout, stderr)
    }

    /// Starts `text` in the background, in a process group of its own (so Ctrl-C reaches every
    /// process it starts, as from a terminal).
    fn start(&mut self, text: &str) -> Background {
        let command = self.take(text);
        let log = self.logs.join(format!("{}.log", self.ran.len()));
        let file = std::fs::File::create(&log).unwrap();
        let child = self
            .command(command)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .process_group(0)
            .spawn()
            .unwrap();
        eprintln!(
            "[{}] started `{command}` in {}",
            self.name,
            self.dir.display()
        );
        Background {
            child,
            log,
            what: command,
        }
    }

    /// `cd DIR`.
    fn cd(&mut self, text: &str) {
        let command = self.take(text);
        let dir = command.strip_prefix("cd ").expect("a cd command");
        self.dir = self.dir.join(dir);
    }

    /// Every command of the scenario ran.
    fn finish(self) {
        let missing: Vec<&&str> = self
            .script
            .iter()
            .filter(|c| !self.ran.contains(**c))
            .collect();
        assert!(missing.is_empty(), "{} did not run {missing:?}", self.name);
    }
}

/// A command running in the background; killed with its process group on drop.
struct Background {
    child: Child,
    log: PathBuf,
    what: &'static str,
}

impl Background {
    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_for(&mut self, what: &str, within: Duration, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + within;
        loop {
            let output = self.output();
            if done(&output) {
                return output;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("`{}` exited ({status}) before {what}:\n{output}", self.what);
            }
            assert!(
                Instant::now() < deadline,
                "`{}`: no {what} within {within:?}:\n{output}",
                self.what
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn signal(&self, signal: i32) {
        // SAFETY: signalling the process group this test started.
        unsafe {
            libc::kill(-(self.child.id() as libc::pid_t), signal);
        }
    }

    /// Ctrl-C, as in its terminal; its exit status and output once it ended.
    fn interrupt(mut self, within: Duration) -> (ExitStatus, String) {
        self.signal(libc::SIGINT);
        let status = kit::try_wait_within(&mut self.child, within).unwrap_or_else(|| {
            panic!(
                "`{}` did not end within {within:?} of Ctrl-C:\n{}",
                self.what,
                self.output()
            )
        });
        (status, self.output())
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }
}

/// A folder standing in for the repository root (see the module's documentation): inside the
/// checkout, with the checkout's `target` and copies of its function app folders.
fn stand_in_root(name: &str) -> PathBuf {
    let root = repo().join("target/docs").join(name);
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::symlink(workspace_target(), root.join("target")).unwrap();
    // The function app folder as committed (a checkout's own may hold a copied executable,
    // its data and other settings).
    kit::copy_dir(&repo().join("function_app"), &root.join("function_app"));
    for local in ["hubhost-app", "hubhost", "hubhost-data"] {
        let path = root.join("function_app").join(local);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir_all(&path);
    }
    let committed = kit::output_within(
        Command::new("git")
            .args(["show", "HEAD:function_app/local.settings.json"])
            .current_dir(repo()),
        Duration::from_secs(30),
    );
    if committed.status.success() {
        std::fs::write(
            root.join("function_app/local.settings.json"),
            &committed.stdout,
        )
        .unwrap();
    }
    std::fs::copy(
        repo().join("local.settings.json.example"),
        root.join("local.settings.json.example"),
    )
    .unwrap();
    for example in [
        "count-readings",
        "forward-alarms",
        "home-limits",
        "forward-events",
    ] {
        kit::copy_dir(
            &repo().join("examples").join(example).join("function_app"),
            &root.join("examples").join(example).join("function_app"),
        );
    }
    root
}

/// hubhost and hubhost-app installed by the README's commands, once per run.
fn installed() -> &'static Path {
    static INSTALLED: OnceLock<PathBuf> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let root = workspace_target().join("docs/installed");
        let _ = std::fs::remove_dir_all(&root);
        let mut shell = Shell::user("install", INSTALL, &repo(), &root);
        shell.set("CARGO_INSTALL_ROOT", &root);
        shell.set("CARGO_TARGET_DIR", &workspace_target());
        for command in INSTALL {
            shell.ok(command, Duration::from_secs(2400));
        }
        shell.finish();
        for binary in ["hubhost", "hubhost-app"] {
            assert!(
                root.join("bin").join(binary).is_file(),
                "{binary} is not installed"
            );
        }
        root
    })
}

/// `GET path` on 127.0.0.1:`port` as a browser asks for a page (`Accept: text/html`): the
/// whole response.
fn get_as_a_browser(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/html\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// The number after `prefix` in the last line of `text` that has one there (`sent 120 …`,
/// `seq        41`).
fn last_number_after(text: &str, prefix: &str) -> Option<u64> {
    text.lines().rev().find_map(|line| {
        let rest = line[line.find(prefix)? + prefix.len()..].trim_start();
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

/// The number before `suffix` in the last line of `text` that has one there (`…, 120 events`).
fn last_number_before(text: &str, suffix: &str) -> Option<u64> {
    text.lines().rev().find_map(|line| {
        let before = &line[..line.find(suffix)?];
        let digits: String = before
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        digits.parse().ok()
    })
}

// ---------------------------------------------------------------------------------------------
// The scenarios

#[test]
fn the_first_command_runs_the_demo_on_its_embedded_default() {
    let installed = installed();
    let _ports = default_ports();
    let root = stand_in_root("first-command");
    let mut shell = Shell::user("first command", FIRST_COMMAND, &root, installed);
    let mut demo = shell.start("cargo run --release -- demo");
    demo.wait_for("the page's address", Duration::from_secs(1800), |out| {
        out.lines().any(|l| l.trim() == "http://127.0.0.1:7071/")
    });
    let page = get_as_a_browser(7071, "/");
    assert!(page.contains("<html"), "{page}");
    // The fleet until the progress line shows events aggregated, as a user watches it (on a
    // loaded machine the pool may take a while to settle), then Ctrl-C: the summary of what
    // the app wrote.
    demo.wait_for("events aggregated", Duration::from_secs(300), |out| {
        last_number_after(out, "demo: ").is_some_and(|aggregated| aggregated > 0)
    });
    let (status, out) = demo.interrupt(Duration::from_secs(90));
    assert!(status.success(), "{status}:\n{out}");
    let sent = last_number_after(&out, "sent ").unwrap_or(0);
    let held = last_number_after(&out, "holding ").unwrap_or(0);
    assert!(sent > 0 && held > 0, "sent {sent}, holding {held}:\n{out}");
    // The embedded default keeps everything in ./hubhost-data.
    assert!(root.join("hubhost-data").is_dir());
    shell.finish();
}

#[test]
fn the_five_minute_path_works_as_a_user_types_it() {
    kit::require!(Tool::Zigbuild);
    let installed = installed();
    let work = tempfile::tempdir().unwrap();
    let mut shell = Shell::user("five minutes", FIVE_MINUTES, work.path(), installed);

    // 1. New: the project, with the lock of the versions hubhost was tested with.
    shell.ok(
        "hubhost new my-function --function CountEvents --event-hub sensors",
        Duration::from_secs(60),
    );
    shell.cd("cd my-function");
    let project = work.path().join("my-function");
    let tested = std::fs::read_to_string(repo().join("Cargo.lock")).unwrap();
    assert!(
        project.join("Cargo.lock").is_file(),
        "hubhost new writes Cargo.lock"
    );

    // 2. Test: both tiers, from an empty target folder, then after an edit.
    let started = Instant::now();
    let out = shell.ok("cargo test", Duration::from_secs(1800));
    eprintln!(
        "first `cargo test` of a new project (empty target folder): {:.0} s",
        started.elapsed().as_secs_f64()
    );
    for test in [
        "a_batch_is_answered_with_its_summary ... ok",
        "every_event_sent_is_processed ... ok",
        "rehearsal_of_what_azure_does_to_it ... ok",
    ] {
        assert!(out.contains(test), "{out}");
    }
    // Every version the build used is the one hubhost was tested with.
    let lock = std::fs::read_to_string(project.join("Cargo.lock")).unwrap();
    for entry in lock.split("[[package]]").skip(1) {
        let name_version: String = entry.lines().take(3).collect::<Vec<_>>().join("\n");
        if entry.contains("name = \"my-function\"") {
            continue;
        }
        assert!(
            tested.contains(name_version.trim()),
            "not the tested version:\n{name_version}"
        );
    }
    // The function lives in src/lib.rs (src/main.rs serves it).
    let function = project.join("src/lib.rs");
    let source = std::fs::read_to_string(&function).unwrap();
    std::fs::write(&function, source.replace("{bytes} bytes", "{bytes} octets")).unwrap();
    let started = Instant::now();
    let out = shell.run("cargo test", Duration::from_secs(600));
    eprintln!(
        "`cargo test` after an edit of the function: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "the edited function fails its unit test:\n{stdout}"
    );
    assert!(
        stdout.contains("a_batch_is_answered_with_its_summary ... FAILED"),
        "{stdout}"
    );
    std::fs::write(&function, &source).unwrap();
    shell.ok("cargo test", Duration::from_secs(600));

    // 3. Invoke one batch, from the project folder with every path relative.
    let out = shell.ok(
        "hubhost invoke CountEvents --events events.json",
        Duration::from_secs(120),
    );
    let answer: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(answer["succeeded"], true, "{answer}");
    assert!(
        answer["logs"][0]
            .as_str()
            .is_some_and(|log| log.starts_with("partition 0, sequence numbers 0..=1: ")),
        "{answer}"
    );

    // 4. The hub, the trigger rebuilt as you edit, and readings.
    let ports = default_ports();
    let mut hub = shell.start("hubhost hub");
    hub.wait_for("the hub listening", Duration::from_secs(60), |_| {
        std::net::TcpStream::connect(("127.0.0.1", 5672)).is_ok()
    });
    let mut emulate = shell.start("hubhost emulate --app function_app --watch");
    emulate.wait_for("the handler started", Duration::from_secs(600), |out| {
        out.contains("hubhost emulate: instance")
    });
    let out = shell.ok(
        "hubhost simulate --hub sensors --homes 100 --duration 20",
        Duration::from_secs(300),
    );
    let sent = last_number_after(&out, "sent ").unwrap_or_else(|| panic!("{out}"));
    assert!(sent >= 200, "{out}");
    emulate.wait_for("every reading processed", Duration::from_secs(120), |out| {
        last_number_before(out, " events,").is_some_and(|n| n >= sent)
    });
    // The checkpoints in ./hubhost-data: every partition's, together one past every reading.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = shell.ok(
            "hubhost checkpoints list --namespace localhost --hub sensors",
            Duration::from_secs(60),
        );
        let partitions: Vec<&str> = listed
            .lines()
            .filter(|l| l.starts_with("partition "))
            .collect();
        let checkpointed: u64 = partitions
            .iter()
            .filter_map(|l| last_number_after(l, "seq "))
            .map(|seq| seq + 1)
            .sum();
        if checkpointed == sent {
            assert_eq!(partitions.len(), 16, "{listed}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "checkpoints cover {checkpointed} of {sent} readings:\n{listed}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    // An edit: rebuilt, and only the handler restarted.
    let source = std::fs::read_to_string(&function).unwrap();
    std::fs::write(
        &function,
        source.replace("// Your logic:", "// Your logic (edited):"),
    )
    .unwrap();
    emulate.wait_for("the rebuild", Duration::from_secs(300), |out| {
        out.contains("handler rebuilt and restarted")
    });
    let (status, out) = emulate.interrupt(Duration::from_secs(60));
    assert!(status.success(), "{status}:\n{out}");
    let (status, out) = hub.interrupt(Duration::from_secs(30));
    assert!(status.success(), "{status}:\n{out}");
    drop(ports);

    // 5. Package, with the full profile (link-time optimization in one codegen unit, the
    // dependencies off an invocation's path optimized for size). The project sets release
    // profiles only for crates it builds, so Cargo has nothing to warn about.
    let (_, stderr) = shell.ok_full_profile(
        "hubhost package --app function_app --out app.zip",
        Duration::from_secs(2400),
    );
    assert!(!stderr.contains("did not match any packages"), "{stderr}");
    let zip = zip::ZipArchive::new(std::fs::File::open(project.join("app.zip")).unwrap()).unwrap();
    let names: BTreeSet<String> = zip
        .file_names()
        .filter_map(Result::ok)
        .map(|name| name.into_owned())
        .collect();
    for name in ["host.json", "CountEvents/function.json", "my-function"] {
        assert!(names.contains(name), "{names:?}");
    }

    // The project's own README gives the same commands.
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    let excused: BTreeSet<&str> = NOT_RUN.iter().map(|(c, _)| *c).collect();
    for command in commands_in(&readme, "my-function/README.md") {
        assert!(
            FIVE_MINUTES.contains(&command.text.as_str())
                || excused.contains(command.text.as_str()),
            "the new project's README says `{}`, which the five-minute path does not run",
            command.text
        );
    }
    shell.finish();
}

/// The emulator's connection string, as the README and docs/hub.md give it.
const EMULATOR_CONNECTION: &str = "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;";

/// `text` as the README has it (the test follows the document).
fn readme_says(text: &str) -> &str {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(readme.contains(text), "the README no longer says {text:?}");
    text
}

/// A fenced block of `language` in `document` that contains `marker`, as written.
fn block(document: &str, language: &str, marker: &str) -> String {
    let text = std::fs::read_to_string(repo().join(document)).unwrap();
    let fence = format!("```{language}\n");
    text.split(&fence)
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(body, _)| body.to_string()))
        .find(|body| body.contains(marker))
        .unwrap_or_else(|| panic!("{document} has no {language} block with {marker:?}"))
}

/// The Python SDK with a documented recipe (tests/python/recipe_peer.py), run in `dir` so that
/// relative paths in the recipe mean what they mean to the user there.
fn python_recipe(dir: &Path, args: &[&str]) -> Value {
    let script = repo().join("tests/python/recipe_peer.py");
    let out = kit::output_within(
        Command::new(kit::python())
            .arg(script)
            .args(args)
            .current_dir(dir),
        Duration::from_secs(180),
    );
    kit::json_output(&format!("recipe_peer.py {args:?}"), &out)
}

/// An event sent with a recipe came back.
fn assert_round_trip(result: &Value, recipe: &str) {
    let received: Vec<&str> = result["received"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_else(|| result["received"].as_str().into_iter().collect());
    assert!(
        received.contains(&result["sent"].as_str().unwrap()),
        "{recipe}: {result}"
    );
}

/// The hubs a running hub lists on its admin endpoint (the default one, 5380).
/// `hubhost hub list` for the hub on the default ports: with the token an in-memory hub printed
/// at start, else the one a hub with a data directory wrote to `hubhost-data/hub` in `root`.
fn hub_list(installed: &Path, root: &Path, printed_token: Option<&str>) -> String {
    let mut command = Command::new(installed.join("bin/hubhost"));
    command.args(["hub", "list"]).current_dir(root);
    if let Some(token) = printed_token {
        command.args(["--admin-token", token]);
    }
    let out = kit::output_within(&mut command, Duration::from_secs(30));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_for_port(port: u16, within: Duration) {
    wait_until(&format!("127.0.0.1:{port} listening"), within, || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
}

/// The Rust SDK with the README's recipe: the emulator's string and the custom endpoint.
fn rust_recipe() {
    use azure_messaging_eventhubs::{
        ConsumerClient, OpenReceiverOptions, ProducerClient, SendEventOptions, StartLocation,
        StartPosition,
    };
    use futures::StreamExt;
    let endpoint = "amqp://127.0.0.1:5672";
    readme_says(&format!(".with_custom_endpoint(\"{endpoint}\")"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let producer = ProducerClient::builder()
            .with_custom_endpoint(endpoint.into())
            .open_with_connection_string(EMULATOR_CONNECTION, Some("sensors"))
            .await
            .expect("the producer opens");
        let before = producer.get_partition_properties("1").await.unwrap();
        let tag = format!("rust-recipe-{}", std::process::id());
        let event = azure_messaging_eventhubs::models::EventData::builder()
            .with_body(tag.clone().into_bytes())
            .build();
        producer
            .send_event(
                event,
                Some(SendEventOptions {
                    partition_id: Some("1".into()),
                }),
            )
            .await
            .expect("sent");
        let consumer = ConsumerClient::builder()
            .with_custom_endpoint(endpoint.into())
            .open_with_connection_string(EMULATOR_CONNECTION, Some("sensors"))
            .await
            .expect("the consumer opens");
        let receiver = consumer
            .open_receiver_on_partition(
                "1".into(),
                Some(OpenReceiverOptions {
                    start_position: Some(StartPosition {
                        location: StartLocation::SequenceNumber(
                            before.last_enqueued_sequence_number,
                        ),
                        inclusive: false,
                    }),
                    ..Default::default()
                }),
            )
            .await
            .unwrap();
        let mut stream = receiver.stream_events();
        let event = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("the event arrives")
            .unwrap()
            .unwrap();
        assert_eq!(event.event_data().body(), Some(tag.as_bytes()));
    });
}

#[test]
fn the_hub_starts_as_documented_and_serves_the_documented_recipes() {
    kit::require!(Tool::PythonSdk, Tool::KafkaClients, Tool::SystemTools);
    let installed = installed();
    let _ports = default_ports();
    let root = stand_in_root("hub");
    let mut shell = Shell::user("hub", HUB, &root, installed);
    readme_says(EMULATOR_CONNECTION);

    // The default hub, reached by each client as the README says, and fed by the simulator.
    let mut hub = shell.start("cargo run --release -- hub");
    hub.wait_for("the hub listening", Duration::from_secs(1800), |_| {
        std::net::TcpStream::connect(("127.0.0.1", 5672)).is_ok()
    });
    wait_for_port(9092, Duration::from_secs(30));
    assert_round_trip(
        &python_recipe(&root, &["amqp", EMULATOR_CONNECTION, "{}"]),
        "Python, plain AMQP",
    );
    rust_recipe();
    let properties = block("README.md", "properties", "bootstrap.servers");
    std::fs::write(root.join("client.properties"), &properties).unwrap();
    assert_round_trip(
        &python_recipe(&root, &["kafka", "client.properties"]),
        "librdkafka with the README's properties",
    );
    let out = shell.ok(
        "cargo run --release -- simulate --homes 2000 --speed-up 60 --minutes 10",
        Duration::from_secs(300),
    );
    assert_eq!(
        last_number_after(&out, "sent "),
        Some(2000 * 8 * 10),
        "{out}"
    );
    let out = shell.ok(
        "cargo run --release -- simulate --rate 5000 --duration 10",
        Duration::from_secs(300),
    );
    assert!(
        last_number_after(&out, "sent ").is_some_and(|n| n > 10_000),
        "{out}"
    );
    let out = shell.ok(
        "cargo run --release -- simulate --unthrottled --events 100000 --json",
        Duration::from_secs(300),
    );
    let summary: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(summary["events"], 100_000, "{summary}");
    let realtime = shell.start("cargo run --release -- simulate");
    std::thread::sleep(Duration::from_secs(8));
    let (status, out) = realtime.interrupt(Duration::from_secs(60));
    assert!(status.success(), "{status}:\n{out}");
    assert!(
        last_number_after(&out, "sent ").is_some_and(|n| n > 0),
        "{out}"
    );
    let (status, out) = hub.interrupt(Duration::from_secs(30));
    assert!(status.success(), "{status}:\n{out}");

    // Hubs named on the command line, in memory.
    let mut hub = shell.start(
        "cargo run --release -- hub --hub orders:4:audit --hub sensors:16:archive --in-memory",
    );
    wait_for_port(5380, Duration::from_secs(60));
    let printed = hub.wait_for("the admin token", Duration::from_secs(10), |out| {
        out.contains("(token: ")
    });
    let token = printed
        .split("(token: ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap()
        .to_string();
    let listed = hub_list(installed, &root, Some(&token));
    assert!(
        listed.contains("orders: 4 partitions, consumer groups $default, audit"),
        "{listed}"
    );
    assert!(listed.contains("sensors: 16 partitions"), "{listed}");
    drop(hub.interrupt(Duration::from_secs(30)));

    // The official emulator's Config.json, as docs/hub.md shows one.
    std::fs::write(
        root.join("Config.json"),
        block("docs/hub.md", "json", "UserConfig"),
    )
    .unwrap();
    let hub = shell.start("cargo run --release -- hub --config Config.json");
    wait_for_port(5380, Duration::from_secs(60));
    let listed = hub_list(installed, &root, None);
    assert!(
        listed.contains("sensors: 4 partitions, consumer groups $default, cg1"),
        "{listed}"
    );
    drop(hub.interrupt(Duration::from_secs(30)));

    // TLS and WebSockets, with the README's recipes; the authority in hubhost-data/tls, which
    // the recipe names relative to the folder the hub was started in.
    let tls_connection = "Endpoint=sb://localhost/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE";
    readme_says("`Endpoint=sb://localhost/;…` (no emulator setting)");
    let ca = "hubhost-data/tls/ca.pem";
    readme_says(&format!("connection_verify=\"{ca}\""));
    readme_says(
        "transport_type=TransportType.AmqpOverWebsocket, custom_endpoint_address=\"sb://localhost:5443\"",
    );
    // The user's own certificate (one for localhost, made as a user would with openssl).
    let made = kit::output_within(
        Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            ])
            .args([
                "-keyout",
                "my.key",
                "-out",
                "my.pem",
                "-subj",
                "/CN=localhost",
            ])
            .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
            .current_dir(&root),
        Duration::from_secs(60),
    );
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let websocket = "sb://localhost:5443";
    let cases = [
        (
            "cargo run --release -- hub --tls",
            5671,
            tls_connection,
            serde_json::json!({ "connection_verify": ca }),
        ),
        (
            "cargo run --release -- hub --websocket",
            5443,
            EMULATOR_CONNECTION,
            serde_json::json!({ "transport": "websocket", "custom_endpoint_address": websocket }),
        ),
        (
            "cargo run --release -- hub --tls --websocket",
            5443,
            tls_connection,
            serde_json::json!({
                "transport": "websocket",
                "custom_endpoint_address": websocket,
                "connection_verify": ca,
            }),
        ),
        (
            "cargo run --release -- hub --tls-port 6671 --tls-cert my.pem --tls-key my.key",
            6671,
            tls_connection,
            serde_json::json!({
                "custom_endpoint_address": "sb://localhost:6671",
                "connection_verify": "my.pem",
            }),
        ),
    ];
    for (command, port, connection, options) in cases {
        let hub = shell.start(command);
        wait_for_port(port, Duration::from_secs(60));
        assert_round_trip(
            &python_recipe(&root, &["amqp", connection, &options.to_string()]),
            &format!("Python with {options} on `{command}`"),
        );
        drop(hub.interrupt(Duration::from_secs(30)));
    }
    shell.finish();
}

#[test]
fn the_reference_app_runs_as_docs_running_says() {
    kit::require!(Tool::Zigbuild);
    let installed = installed();

    // Preparing `func start` (which cannot run here): the executable and the settings beside
    // host.json.
    let root = stand_in_root("running-func");
    let mut shell = Shell::user("running", RUNNING, &root, installed);
    shell.ok(
        "cargo build --release -p hubhost-app && cp target/release/hubhost-app function_app/",
        Duration::from_secs(1800),
    );
    shell.ok(
        "cp local.settings.json.example function_app/local.settings.json",
        Duration::from_secs(10),
    );
    assert!(root.join("function_app/hubhost-app").is_file());
    let settings: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("function_app/local.settings.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(settings["Values"]["FUNCTIONS_WORKER_RUNTIME"], "custom");

    // The trigger locally, each command in its own terminal, from another root.
    let root = stand_in_root("running-emulate");
    shell.dir = root.clone();
    let ports = default_ports();
    let hub = shell.start("hubhost hub");
    wait_for_port(5672, Duration::from_secs(60));
    let fleet = shell.start("hubhost simulate --homes 1000 --speed-up 10");
    let mut emulate = shell.start("hubhost emulate --app function_app");
    emulate.wait_for("readings processed", Duration::from_secs(180), |out| {
        out.contains("SensorAggregator")
            && last_number_before(out, " events,").is_some_and(|n| n > 1000)
    });
    // The app's HTTP function (the page), served where `func start` serves it and forwarded
    // to the handler as host.json's enableForwardingHttpRequest says.
    let out = emulate.output();
    assert!(
        out.contains("Dashboard ← HTTP GET http://127.0.0.1:7071/api/dashboard/{*path}"),
        "{out}"
    );
    let page = get_as_a_browser(7071, "/api/dashboard/");
    assert!(
        page.contains("<html") && page.contains("/api/dashboard/app.js"),
        "{page}"
    );
    let (status, out) = emulate.interrupt(Duration::from_secs(60));
    assert!(status.success(), "{status}:\n{out}");
    // The scale controller starts instances for the backlog the fleet keeps making.
    let mut scale = shell
        .start("hubhost emulate --scale --app function_app --scale-interval 5 --scale-in-hold 30");
    scale.wait_for("a scale-out", Duration::from_secs(120), |out| {
        out.lines().any(|l| {
            l.starts_with("scale SensorAggregator:")
                && l.contains("instances 0 → ")
                && !l.ends_with("→ 0")
        })
    });
    let (status, out) = scale.interrupt(Duration::from_secs(120));
    assert!(status.success(), "{status}:\n{out}");
    let (status, out) = fleet.interrupt(Duration::from_secs(60));
    assert!(status.success(), "{status}:\n{out}");
    drop(hub);
    drop(ports);

    // The deployment zip of the reference app, with the full profile as tests/cli/package.rs
    // builds it: that build is this one's.
    let (out, _) =
        shell.ok_full_profile("hubhost package --out app.zip", Duration::from_secs(2400));
    assert!(out.contains("app.zip: valid"), "{out}");
    let zip = zip::ZipArchive::new(std::fs::File::open(root.join("app.zip")).unwrap()).unwrap();
    let names: BTreeSet<String> = zip
        .file_names()
        .filter_map(Result::ok)
        .map(|name| name.into_owned())
        .collect();
    assert!(
        names.contains("hubhost-app") && names.contains("host.json"),
        "{names:?}"
    );
    shell.finish();
}

#[test]
fn the_examples_run_as_docs_writing_functions_says() {
    let installed = installed();
    let _ports = default_ports();
    let root = stand_in_root("examples");
    let mut shell = Shell::user("examples", EXAMPLES, &root, installed);
    let hub = shell.start("hubhost hub");
    wait_for_port(5672, Duration::from_secs(60));
    let out = shell.ok(
        "hubhost simulate --hub sensors --homes 100 --duration 20",
        Duration::from_secs(300),
    );
    let sent = last_number_after(&out, "sent ").unwrap_or_else(|| panic!("{out}"));
    for example in [
        "cargo build -p count-readings && hubhost emulate --app examples/count-readings/function_app",
        "cargo build -p forward-alarms && hubhost emulate --app examples/forward-alarms/function_app",
        "cargo build -p home-limits && hubhost emulate --app examples/home-limits/function_app",
    ] {
        let mut emulate = shell.start(example);
        emulate.wait_for("every reading processed", Duration::from_secs(900), |out| {
            last_number_before(out, " events,").is_some_and(|n| n >= sent)
        });
        let (status, out) = emulate.interrupt(Duration::from_secs(60));
        assert!(status.success(), "{example}: {status}:\n{out}");
        // Each ran from its own checkpoints, one after the other, in ./hubhost-data.
        let _ = std::fs::remove_dir_all(root.join("hubhost-data/azure-webjobs-eventhub"));
    }
    drop(hub);
    shell.finish();
}

#[test]
fn the_simulated_rehearsal_runs_as_docs_testing_says() {
    let installed = installed();
    let root = stand_in_root("rehearse");
    // The handler the command names, as `cargo build` leaves it (the suite builds it too).
    let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    kit::without_test_run_env(&mut build)
        .args(["build", "-p", "forward-events", "--bin", "forward-naive"])
        .current_dir(repo());
    let built = kit::output_within(&mut build, Duration::from_secs(900));
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let mut shell = Shell::user("rehearse", REHEARSE, &root, installed);
    shell.cd("cd examples/forward-events");
    let command = REHEARSE[1];
    let first = shell.run(command, Duration::from_secs(600));
    // The naive forwarder duplicates: the rehearsal fails, and says so.
    assert!(!first.status.success());
    let report: Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(report["simulated"], true);
    assert!(
        !report["duplicated"].as_array().unwrap().is_empty(),
        "{report}"
    );
    let shrunk = &report["shrunk"];
    assert!(
        shrunk["faults"].as_array().unwrap().len() < report["faults"].as_array().unwrap().len(),
        "{shrunk}"
    );
    let replay = shrunk["replay"].as_str().unwrap();
    assert!(replay.starts_with("hubhost rehearse --simulate ") && replay.contains("--only-faults"));
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(
        stderr.contains("replay it: hubhost rehearse --simulate"),
        "{stderr}"
    );
    // The same command again: the same report, byte for byte.
    let second = shell.run(command, Duration::from_secs(600));
    assert_eq!(
        String::from_utf8_lossy(&first.stdout),
        String::from_utf8_lossy(&second.stdout)
    );
    shell.finish();
}
