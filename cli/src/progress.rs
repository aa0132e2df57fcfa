//! What a person sees while cordon works: drawn on stderr, only when stderr is a terminal (the
//! bars are hidden otherwise) and never with `--json`.

use std::sync::Mutex;
use std::time::Duration;

use cordon_proof::gate::GateProgress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

const TICK: Duration = Duration::from_millis(120);

fn target(json: bool) -> ProgressDrawTarget {
    if json {
        ProgressDrawTarget::hidden()
    } else {
        // Hidden by indicatif itself when stderr is not a terminal.
        ProgressDrawTarget::stderr()
    }
}

/// A spinner whose message is the current step.
pub fn spinner(json: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, target(json));
    bar.set_style(ProgressStyle::default_spinner());
    bar.enable_steady_tick(TICK);
    bar
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner())
}

/// The gate's bar: cases done of total, and the case it is waiting on.
#[derive(Debug)]
pub struct GateBar {
    bar: ProgressBar,
    /// Cases started and not finished, in the order they started: the first is the oldest.
    running: Mutex<Vec<String>>,
}

impl GateBar {
    pub fn new(json: bool) -> GateBar {
        let bar = ProgressBar::with_draw_target(None, target(json));
        bar.set_style(style("{spinner} gate [{elapsed}] {msg}"));
        bar.set_message("preparing storage");
        bar.enable_steady_tick(TICK);
        GateBar {
            bar,
            running: Mutex::new(Vec::new()),
        }
    }

    /// Follow one report of the gate.
    pub fn update(&self, at: GateProgress<'_>) {
        if self.bar.length() != Some(at.total as u64) {
            // The count is known once the first case starts.
            self.bar.set_length(at.total as u64);
            self.bar
                .set_style(style("{spinner} gate {pos}/{len} cases [{elapsed}] {msg}"));
        }
        self.bar.set_position(at.done as u64);
        // A poisoned set only loses the names shown; the counts stay right.
        let Ok(mut running) = self.running.lock() else {
            return;
        };
        if at.finished {
            running.retain(|name| name != at.case);
        } else {
            running.push(at.case.to_owned());
        }
        let message = match running.as_slice() {
            [] if at.done == at.total => "checking that nothing is left".to_owned(),
            [] => String::new(),
            [one] => one.clone(),
            [oldest, rest @ ..] => format!("{oldest} (+{} running)", rest.len()),
        };
        self.bar.set_message(message);
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
