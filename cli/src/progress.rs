//! What a person sees while cordon works: drawn on stderr, only when stderr is a terminal (the
//! bars are hidden otherwise) and never with `--json`.

use std::time::Duration;

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
