//! Why cordon will not read a file a caller named.

/// What was wrong with a file a caller named: the evidence in [`Error::Input`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputFault {
    /// Not a regular file: what it is ("a FIFO", "a directory", "a symlink", ...).
    NotRegular(&'static str),
    /// More than the bound: at least this many bytes.
    TooLarge { at_least: u64, limit: u64 },
    /// Opening, inspecting or reading it failed (a missing file is one); the OS error number
    /// when there is one.
    Unreadable { reason: String, errno: Option<i32> },
    /// Text that is not UTF-8: the offset of the first byte that is not.
    NotUtf8 { at: usize },
}

impl std::fmt::Display for InputFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InputFault::NotRegular(kind) => write!(f, "{kind}, not a regular file"),
            InputFault::TooLarge { at_least, limit } => {
                write!(f, "{at_least}+ bytes, the limit is {limit}")
            }
            InputFault::Unreadable { reason, .. } => write!(f, "cannot be read: {reason}"),
            InputFault::NotUtf8 { at } => write!(f, "not UTF-8 (byte {at})"),
        }
    }
}

impl InputFault {
    /// The stable id [`crate::Error::id`] gives it.
    pub fn id(&self) -> &'static str {
        match self {
            InputFault::NotRegular(_) => "input-not-regular",
            InputFault::TooLarge { .. } => "input-too-large",
            InputFault::Unreadable { .. } => "input-unreadable",
            InputFault::NotUtf8 { .. } => "input-not-utf8",
        }
    }
}
