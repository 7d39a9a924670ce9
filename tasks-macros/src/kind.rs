//! Which attribute is being expanded: the one fact every stage needs, so it sits below them.

/// `#[workflow]` or `#[step]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MacroKind {
    /// `#[workflow]`.
    Workflow,
    /// `#[step]`.
    Step,
}

impl MacroKind {
    /// The attribute as users write it, for messages.
    pub(crate) fn attribute(self) -> &'static str {
        match self {
            MacroKind::Workflow => "#[workflow]",
            MacroKind::Step => "#[step]",
        }
    }

    /// A plausible name for messages: `name = "checkout"`.
    pub(crate) fn example_name(self) -> &'static str {
        match self {
            MacroKind::Workflow => "checkout",
            MacroKind::Step => "charge-card",
        }
    }

    /// The last path segment of the attribute (`tasks::step` ends in `step`).
    pub(crate) fn segment(self) -> &'static str {
        match self {
            MacroKind::Workflow => "workflow",
            MacroKind::Step => "step",
        }
    }
}
