//! A logger for tests: every record of the crate, kept in memory, so a test can count what a
//! fault logs and at which level. One per process (`log` allows one logger): install it with
//! [`capture`], and keep the tests that read it apart from others that log (a test file of
//! their own, each test taking [`Captured::exclusive`]).

use std::sync::{Mutex, MutexGuard, OnceLock};

/// One log record: its level and its text.
#[derive(Clone, Debug)]
pub struct Line {
    pub level: log::Level,
    pub text: String,
}

/// The records kept since the last [`Captured::clear`].
pub struct Captured {
    lines: Mutex<Vec<Line>>,
    one_at_a_time: Mutex<()>,
}

impl Captured {
    /// Serialises the tests that read the log, and starts this one with an empty log.
    pub fn exclusive(&self) -> MutexGuard<'_, ()> {
        let guard = self.one_at_a_time.lock().unwrap_or_else(|e| e.into_inner());
        self.clear();
        guard
    }

    pub fn clear(&self) {
        self.lines.lock().unwrap().clear();
    }

    pub fn lines(&self) -> Vec<Line> {
        self.lines.lock().unwrap().clone()
    }

    /// The lines at `level`.
    pub fn at(&self, level: log::Level) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.level == level)
            .map(|l| l.text)
            .collect()
    }
}

impl log::Log for Captured {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.target().starts_with("redlatch")
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            self.lines.lock().unwrap().push(Line {
                level: record.level(),
                text: record.args().to_string(),
            });
        }
    }

    fn flush(&self) {}
}

/// The process's captured log, installed at the first call (debug and above).
pub fn capture() -> &'static Captured {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    let mut installed = false;
    let captured = CAPTURED.get_or_init(|| {
        installed = true;
        Captured {
            lines: Mutex::new(Vec::new()),
            one_at_a_time: Mutex::new(()),
        }
    });
    if installed {
        log::set_logger(captured).expect("no other logger in this test process");
        log::set_max_level(log::LevelFilter::Debug);
    }
    captured
}
