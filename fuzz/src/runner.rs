//! The per-input runner: receives a [`Target`] and [`Limits`], generates input after input from
//! `(seed, index)`, runs each under `catch_unwind`, and measures its wall time and (with the
//! counting allocator installed) its peak allocation. Emits a [`Report`] or the first
//! [`Failure`] with a replayable input. A watchdog thread ends the process with the reproducer
//! when one input runs far past the time limit (a true hang never returns to be measured).

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::alloc;
use crate::rng::Rng;
use crate::targets::Target;

/// When to stop and what counts as a failure.
#[derive(Debug, Clone)]
pub struct Limits {
    pub seed: u64,
    /// Stop after this many inputs (`None`: only the time budget stops the run).
    pub inputs: Option<u64>,
    /// Stop after this much time (`None`: only the input count stops the run).
    pub duration: Option<Duration>,
    /// First input index (to replay a region of a run).
    pub start: u64,
    /// One input taking longer fails the run.
    pub max_input_time: Duration,
    /// One input allocating more (peak live bytes above the baseline) fails the run.
    pub max_input_alloc: usize,
    /// The watchdog ends the process when one input has run this long.
    pub hang_abort: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            seed: 0x5eed,
            inputs: Some(10_000),
            duration: None,
            start: 0,
            max_input_time: Duration::from_secs(1),
            max_input_alloc: 64 << 20,
            hang_abort: Duration::from_secs(20),
        }
    }
}

/// What a finished run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub target: &'static str,
    pub inputs: u64,
    pub elapsed: Duration,
    pub max_input_time: Duration,
    /// Length of the slowest input.
    pub slowest_len: usize,
    /// Highest per-input peak allocation; `None` without the counting allocator.
    pub max_input_alloc: Option<usize>,
    pub total_bytes: u64,
}

impl Report {
    pub fn inputs_per_sec(&self) -> f64 {
        self.inputs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let alloc = match self.max_input_alloc {
            Some(b) => format!("{:.2} MiB", b as f64 / f64::from(1 << 20)),
            None => "n/a (counting allocator not installed)".into(),
        };
        write!(
            f,
            "{}: {} inputs in {:.1}s ({:.0}/s), avg input {} B, max per-input time {:.3} ms ({} B input), max per-input allocation {}",
            self.target,
            self.inputs,
            self.elapsed.as_secs_f64(),
            self.inputs_per_sec(),
            self.total_bytes / self.inputs.max(1),
            self.max_input_time.as_secs_f64() * 1e3,
            self.slowest_len,
            alloc,
        )
    }
}

/// Why a run failed.
#[derive(Debug, Clone)]
pub enum FailureKind {
    Panic(String),
    Slow(Duration),
    Alloc(usize),
}

/// The first failing input of a run.
#[derive(Debug, Clone)]
pub struct Failure {
    pub target: &'static str,
    pub seed: u64,
    pub index: u64,
    pub kind: FailureKind,
    pub input: Vec<u8>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            FailureKind::Panic(msg) => write!(f, "{}: PANIC: {msg}", self.target)?,
            FailureKind::Slow(t) => write!(
                f,
                "{}: SLOW: one input took {:.3} s",
                self.target,
                t.as_secs_f64()
            )?,
            FailureKind::Alloc(b) => write!(
                f,
                "{}: ALLOC: one input peaked at {:.1} MiB",
                self.target,
                *b as f64 / f64::from(1 << 20)
            )?,
        }
        write!(
            f,
            "\n  seed {:#x}, input #{} ({} bytes)\n  text: {:?}\n  hex:  {}\n  replay: cargo run --release -p rkubelet-fuzz -- {} --replay {}",
            self.seed,
            self.index,
            self.input.len(),
            String::from_utf8_lossy(&self.input[..self.input.len().min(4096)]),
            hex::encode(&self.input),
            self.target,
            hex::encode(&self.input),
        )
    }
}

/// The text of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".into()
    }
}

/// The input in flight, for the watchdog.
struct InFlight {
    started: Instant,
    index: u64,
    input: Vec<u8>,
}

/// Ends the process (with the reproducer) if one input runs past `hang_abort`.
fn spawn_watchdog(
    target: &'static str,
    seed: u64,
    hang_abort: Duration,
    current: Arc<Mutex<Option<InFlight>>>,
    done: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            let guard = kubelet::sync::lock(&current);
            if let Some(f) = guard.as_ref()
                && f.started.elapsed() > hang_abort
            {
                let failure = Failure {
                    target,
                    seed,
                    index: f.index,
                    kind: FailureKind::Slow(f.started.elapsed()),
                    input: f.input.clone(),
                };
                eprintln!("{failure}\n  (still running: the watchdog ends the process)");
                std::process::exit(3);
            }
        }
    })
}

/// Runs `input` once through `target`, measuring it.
pub fn run_one(target: &Target, input: &[u8]) -> (Result<(), String>, Duration, usize) {
    let base = alloc::reset_peak();
    let t0 = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| (target.run)(input)));
    let took = t0.elapsed();
    let peak = usize::try_from(alloc::peak() - base).unwrap_or(0);
    (result.map_err(|p| panic_message(&*p)), took, peak)
}

/// Fuzzes `target` within `limits`; the first failing input ends the run.
pub fn run_target(target: &Target, limits: &Limits) -> Result<Report, Box<Failure>> {
    let counting = alloc::installed();
    let current = Arc::new(Mutex::new(None::<InFlight>));
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = spawn_watchdog(
        target.name,
        limits.seed,
        limits.hang_abort,
        current.clone(),
        done.clone(),
    );
    let result = fuzz_loop(target, limits, counting, &current);
    done.store(true, Ordering::Relaxed);
    let _ = watchdog.join();
    result
}

fn fuzz_loop(
    target: &Target,
    limits: &Limits,
    counting: bool,
    current: &Mutex<Option<InFlight>>,
) -> Result<Report, Box<Failure>> {
    let t0 = Instant::now();
    let mut report = Report {
        target: target.name,
        inputs: 0,
        elapsed: Duration::ZERO,
        max_input_time: Duration::ZERO,
        slowest_len: 0,
        max_input_alloc: counting.then_some(0),
        total_bytes: 0,
    };
    let mut index = limits.start;
    loop {
        if limits.inputs.is_some_and(|n| report.inputs >= n)
            || limits.duration.is_some_and(|d| t0.elapsed() >= d)
        {
            break;
        }
        let input = (target.generate)(&mut Rng::for_input(limits.seed, index));
        *kubelet::sync::lock(current) = Some(InFlight {
            started: Instant::now(),
            index,
            input: input.clone(),
        });
        let (outcome, took, peak) = run_one(target, &input);
        *kubelet::sync::lock(current) = None;
        let fail = |kind| {
            Box::new(Failure {
                target: target.name,
                seed: limits.seed,
                index,
                kind,
                input: input.clone(),
            })
        };
        if let Err(msg) = outcome {
            return Err(fail(FailureKind::Panic(msg)));
        }
        if took > limits.max_input_time {
            return Err(fail(FailureKind::Slow(took)));
        }
        if counting && peak > limits.max_input_alloc {
            return Err(fail(FailureKind::Alloc(peak)));
        }
        if took > report.max_input_time {
            report.max_input_time = took;
            report.slowest_len = input.len();
        }
        if let Some(m) = report.max_input_alloc.as_mut() {
            *m = (*m).max(peak);
        }
        report.inputs += 1;
        report.total_bytes += input.len() as u64;
        index += 1;
    }
    report.elapsed = t0.elapsed();
    Ok(report)
}
