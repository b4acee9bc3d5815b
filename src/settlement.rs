//! CommandSettlement: how one accepted command ended, written once with the
//! settling transition and read independently of transcript paging.

use crate::error::ApiError;
use crate::model::Usage;
use crate::store::Terminal;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settlement {
    pub command_id: String,
    pub terminal: Terminal,
    pub answer: Option<String>,
    pub usage: Option<Usage>,
    pub tool_call_count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostic: Option<String>,
    /// The host metadata of the cancellation that ended a cancelled command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
    /// Messages the settling write appended (stored JSON), to publish as
    /// `message` frames before this settlement: the `tool` messages that
    /// close the calls a turn left open (on the head's settlement only).
    /// Not part of the settlement itself: never serialized.
    #[serde(skip)]
    pub appended: Vec<String>,
}

impl Settlement {
    /// `answer`: how it ended well: the final text (none for a
    /// compaction, whose summary is its transcript entry), the usage and
    /// the tool calls.
    pub fn new(
        command_id: &str,
        terminal: Terminal,
        answer: Option<(Option<&str>, Option<Usage>, u32)>,
        diagnostic: Option<&str>,
    ) -> Self {
        Settlement {
            command_id: command_id.to_owned(),
            terminal,
            answer: answer.and_then(|(text, _, _)| text.map(str::to_owned)),
            usage: answer.and_then(|(_, usage, _)| usage),
            tool_call_count: answer.map_or(0, |(_, _, n)| n),
            diagnostic: diagnostic.map(str::to_owned),
            meta: None,
            appended: Vec::new(),
        }
    }

    pub fn to_json(&self) -> Result<String, ApiError> {
        serde_json::to_string(self).map_err(|e| ApiError::Internal(e.to_string()))
    }
}

/// The settlement of one command of the Session, `None` while it is not
/// settled; unknown Sessions and commands are errors.
pub fn read(
    store: crate::store::Store<'_>,
    session_id: &str,
    command_id: &str,
) -> Result<Option<Settlement>, ApiError> {
    // A command's row goes with its Session: the Session is read only to
    // name what is missing.
    let Some(row) = store.command(session_id, command_id)? else {
        return Err(match store.session_exists(session_id)? {
            true => ApiError::CommandNotFound(command_id.to_owned()),
            false => ApiError::SessionNotFound(session_id.to_owned()),
        });
    };
    row.settlement
        .map(|json| {
            crate::json::from_text(&json)
                .map_err(|e| ApiError::Internal(format!("stored settlement: {e}")))
        })
        .transpose()
}
