//! Commands as the HTTP contract spells them: closed schemas (an unknown
//! field is refused), validated against the limits before anything is
//! stored. Parsing is pure; admission lives in `admission.rs`.

use crate::error::ApiError;
use crate::limits::{IMAGES_PER_PROMPT_MAX, REQUEST_ID_BYTES_MAX, TEXT_BYTES_MAX};
use crate::model::Image;
use crate::store::{CommandRow, Kind};
use serde::{Deserialize, Serialize};

/// One command body. The `type` field selects the variant; each variant is a
/// closed schema of its own.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Prompt(Prompt),
    Operator(Operator),
    Cancel(Cancel),
    Abort(Abort),
    /// Generate the answer to a user message again, on a new branch beside
    /// the old answer.
    Retry(EntryCommand),
    /// Select the branch through an entry (ending at its newest descendant).
    Select(EntryCommand),
    /// Summarise the selected branch's model context into a compaction entry.
    Compact(Compact),
}

/// A command naming a transcript entry: `retry` and `select`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EntryCommand {
    pub request_id: String,
    pub entry_id: String,
}

/// What a select admits, in its canonical JSON form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryInput {
    pub entry_id: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cancel {
    pub command_id: String,
    #[serde(default)]
    pub only_if_pending: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Abort {}

/// How a prompt joins a Session that is already running a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Delivery {
    /// Queue behind the running turn (the default).
    #[default]
    FollowUp,
    /// Join the running turn at its next model step.
    Steer,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Prompt {
    pub request_id: String,
    pub text: String,
    #[serde(default)]
    pub images: Option<Vec<Image>>,
    #[serde(default)]
    pub delivery: Delivery,
    /// Start a new branch right after this entry (`""`: at the Session's
    /// start): edit and resend.
    #[serde(default)]
    pub after: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Operator {
    pub request_id: String,
    pub text: String,
}

/// A compaction of the Session's model context (`src/run/compaction.rs`),
/// queued like a prompt.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Compact {
    pub request_id: String,
    /// Added to the summary request (what to keep, what to stress).
    #[serde(default)]
    pub instructions: Option<String>,
}

/// What a compaction asks for, canonical as [`PromptInput`] is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

impl Compact {
    pub fn input(&self) -> CompactInput {
        CompactInput {
            instructions: self.instructions.clone().filter(|i| !i.is_empty()),
        }
    }
}

/// What a prompt asks for, in the one canonical JSON form that is stored,
/// compared on replay and served back to readers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptInput {
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
    pub delivery: Delivery,
    /// The entry its branch continues after (`""`: the start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// A retry: the user message whose answer it generates again (its
    /// `text` is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<String>,
}

impl PromptInput {
    /// The entry a turn's branch starts at, as the `branch` frame names it
    /// (`Some(None)`: the Session's start); `None` for a turn that continues
    /// the selected branch.
    pub fn branch_entry(&self) -> Option<Option<&str>> {
        match (&self.retry, &self.after) {
            (Some(entry), _) => Some(Some(entry)),
            (None, Some(after)) => Some((!after.is_empty()).then_some(after.as_str())),
            (None, None) => None,
        }
    }
}

/// What an operator line records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorInput {
    pub text: String,
}

/// Parses and validates one command body.
pub fn parse(body: &[u8]) -> Result<Command, ApiError> {
    let mut value = crate::json::strict(body).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    let object = value
        .as_object_mut()
        .ok_or_else(|| ApiError::InvalidRequest("a command is a JSON object".into()))?;
    // Dispatch on `type` by hand: serde's internally tagged enums lose the
    // path of a bad field, and the error must name it.
    let kind = match object.remove("type") {
        Some(serde_json::Value::String(kind)) => kind,
        Some(_) => return Err(ApiError::InvalidRequest("type: must be a string".into())),
        None => {
            return Err(ApiError::InvalidRequest(
                "type: missing field `type`".into(),
            ))
        }
    };
    let command = match kind.as_str() {
        "prompt" => Command::Prompt(crate::json::from_value(value)?),
        "operator" => Command::Operator(crate::json::from_value(value)?),
        "cancel" => Command::Cancel(crate::json::from_value(value)?),
        "abort" => Command::Abort(crate::json::from_value(value)?),
        "retry" => Command::Retry(crate::json::from_value(value)?),
        "select" => Command::Select(crate::json::from_value(value)?),
        "compact" => Command::Compact(crate::json::from_value(value)?),
        other => {
            return Err(ApiError::InvalidRequest(format!(
                "type: unknown command type `{other}`; expected prompt, operator, cancel, abort, \
                 retry, select or compact"
            )))
        }
    };
    match &command {
        Command::Prompt(p) => validate_prompt(p)?,
        Command::Operator(o) => {
            validate_request_id(&o.request_id)?;
            validate_text(&o.text)?;
            if o.text.is_empty() {
                return Err(ApiError::InvalidRequest(
                    "text: an operator line needs text".into(),
                ));
            }
        }
        Command::Cancel(Cancel { command_id, .. }) => {
            if command_id.is_empty() || command_id.len() > REQUEST_ID_BYTES_MAX {
                return Err(ApiError::InvalidRequest(format!(
                    "commandId: must be 1..={REQUEST_ID_BYTES_MAX} bytes"
                )));
            }
        }
        Command::Abort(_) => {}
        Command::Retry(EntryCommand {
            request_id,
            entry_id,
        })
        | Command::Select(EntryCommand {
            request_id,
            entry_id,
        }) => {
            validate_request_id(request_id)?;
            validate_entry_id("entryId", entry_id, false)?;
        }
        Command::Compact(c) => {
            validate_request_id(&c.request_id)?;
            if let Some(instructions) = &c.instructions {
                if instructions.len() > TEXT_BYTES_MAX {
                    return Err(ApiError::InvalidRequest(format!(
                        "instructions: at most {TEXT_BYTES_MAX} UTF-8 bytes, got {}",
                        instructions.len()
                    )));
                }
            }
        }
    }
    Ok(command)
}

/// An entry id a command names: at most `REQUEST_ID_BYTES_MAX` bytes, and
/// not empty unless `start` (`after: ""` names the Session's start).
fn validate_entry_id(field: &str, id: &str, start: bool) -> Result<(), ApiError> {
    if (id.is_empty() && !start) || id.len() > REQUEST_ID_BYTES_MAX {
        let least = if start { 0 } else { 1 };
        return Err(ApiError::InvalidRequest(format!(
            "{field}: an entry id of {least}..={REQUEST_ID_BYTES_MAX} bytes, got {}",
            id.len()
        )));
    }
    Ok(())
}

/// A prompt's requestId, text and images against the bounds (also for
/// prompts that arrive other than as a command body: ACP's).
pub fn validate_prompt(p: &Prompt) -> Result<(), ApiError> {
    validate_request_id(&p.request_id)?;
    validate_text(&p.text)?;
    let images = p.images.as_deref().unwrap_or_default();
    if images.len() > IMAGES_PER_PROMPT_MAX {
        return Err(ApiError::InvalidRequest(format!(
            "images: at most {IMAGES_PER_PROMPT_MAX} images per prompt, got {}",
            images.len()
        )));
    }
    for (i, image) in images.iter().enumerate() {
        validate_image(i, image)?;
    }
    if p.text.is_empty() && images.is_empty() {
        return Err(ApiError::InvalidRequest(
            "text: a prompt needs text or at least one image".into(),
        ));
    }
    if let Some(after) = &p.after {
        validate_entry_id("after", after, true)?;
        if p.delivery == Delivery::Steer {
            return Err(ApiError::InvalidRequest(
                "after: a steer joins the running turn's branch; a prompt with `after` starts \
                 a new one (send it as followUp)"
                    .into(),
            ));
        }
    }
    Ok(())
}

pub fn validate_request_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() {
        return Err(ApiError::InvalidRequest(
            "requestId: must not be empty".into(),
        ));
    }
    if id.len() > REQUEST_ID_BYTES_MAX {
        return Err(ApiError::InvalidRequest(format!(
            "requestId: at most {REQUEST_ID_BYTES_MAX} UTF-8 bytes, got {}",
            id.len()
        )));
    }
    Ok(())
}

fn validate_text(text: &str) -> Result<(), ApiError> {
    if text.len() > TEXT_BYTES_MAX {
        return Err(ApiError::InvalidRequest(format!(
            "text: at most {TEXT_BYTES_MAX} UTF-8 bytes, got {}",
            text.len()
        )));
    }
    Ok(())
}

fn validate_image(i: usize, image: &Image) -> Result<(), ApiError> {
    image
        .check(&format!("images[{i}]"))
        .map_err(|e| ApiError::InvalidRequest(e.to_string()))
}

impl Prompt {
    pub fn input(&self) -> PromptInput {
        PromptInput {
            text: self.text.clone(),
            images: self.images.clone().unwrap_or_default(),
            delivery: self.delivery,
            after: self.after.clone(),
            retry: None,
        }
    }
}

/// The stored text of a prompt's input (retained after cancellation).
pub fn prompt_input(input: &str) -> Result<PromptInput, ApiError> {
    crate::json::from_text(input).map_err(internal)
}

/// The stored input of queued work as readers see a prompt's: a
/// compaction's instructions are its text (empty without).
pub fn queued_input(row: &CommandRow) -> Result<PromptInput, ApiError> {
    if row.kind != Kind::Compact {
        return prompt_input(&row.input);
    }
    let input: CompactInput = crate::json::from_text(&row.input).map_err(internal)?;
    Ok(PromptInput {
        text: input.instructions.unwrap_or_default(),
        ..Default::default()
    })
}

pub(super) fn internal(e: serde_json::Error) -> ApiError {
    ApiError::Internal(format!("stored json: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(body: &str) -> ApiError {
        parse(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn a_repeated_key_is_refused_and_named() {
        for body in [
            r#"{"type":"prompt","type":"operator","requestId":"r","text":"x"}"#,
            r#"{"type":"prompt","requestId":"r","text":"x","images":[{"mediaType":"image/png","data":"AA","data":"BB"}]}"#,
        ] {
            let e = parse(body.as_bytes()).unwrap_err();
            assert_eq!(e.code(), "invalid_json", "{body}");
            assert!(e.to_string().contains("duplicate key `"), "{e}");
        }
        assert!(err(r#"{"type":"prompt","type":"operator"}"#)
            .to_string()
            .contains("`type`"));
        // Equal keys in different objects are fine.
        parse(br#"{"type":"prompt","requestId":"r","text":"x","images":[{"mediaType":"image/png","data":"AAAA"},{"mediaType":"image/png","data":"AAAA"}]}"#).unwrap();
    }

    #[test]
    fn parses_each_command() {
        let c = parse(br#"{"type":"prompt","requestId":"r","text":"hi","delivery":"steer"}"#);
        assert!(matches!(
            c,
            Ok(Command::Prompt(Prompt {
                delivery: Delivery::Steer,
                ..
            }))
        ));
        let c = parse(br#"{"type":"operator","requestId":"r","text":"note"}"#).unwrap();
        assert!(matches!(c, Command::Operator(_)));
        let c = parse(br#"{"type":"cancel","commandId":"cmd_1","onlyIfPending":true}"#).unwrap();
        assert_eq!(
            c,
            Command::Cancel(Cancel {
                command_id: "cmd_1".into(),
                only_if_pending: true
            })
        );
        assert_eq!(
            parse(br#"{"type":"abort"}"#).unwrap(),
            Command::Abort(Abort {})
        );
        let c = parse(br#"{"type":"compact","requestId":"r","instructions":"keep names"}"#);
        assert_eq!(
            c.unwrap(),
            Command::Compact(Compact {
                request_id: "r".into(),
                instructions: Some("keep names".into())
            })
        );
    }

    #[test]
    fn a_compact_is_closed_and_bounded() {
        let e = err(r#"{"type":"compact","requestId":"r","text":"x"}"#);
        assert!(e.to_string().contains("text"), "{e}");
        assert!(err(r#"{"type":"compact"}"#)
            .to_string()
            .contains("requestId"));
        let long = "a".repeat(TEXT_BYTES_MAX + 1);
        let body = format!(r#"{{"type":"compact","requestId":"r","instructions":"{long}"}}"#);
        assert!(err(&body).to_string().contains("instructions"));
        // Empty instructions are none: the same canonical input.
        let Command::Compact(empty) =
            parse(br#"{"type":"compact","requestId":"r","instructions":""}"#).unwrap()
        else {
            panic!()
        };
        assert_eq!(empty.input(), CompactInput { instructions: None });
    }

    // Names the offending field: the `error-paths` feature.

    #[cfg(feature = "error-paths")]
    #[test]
    fn closed_schemas_name_the_offending_field() {
        let e = err(r#"{"type":"prompt","requestId":"r","text":"x","extra":1}"#);
        assert_eq!(e.code(), "invalid_request");
        assert!(e.to_string().contains("extra"), "{e}");
        let e = err(r#"{"type":"prompt","requestId":"r","text":5}"#);
        assert!(e.to_string().contains("text"), "{e}");
        let e = err(r#"{"type":"abort","force":true}"#);
        assert!(e.to_string().contains("force"), "{e}");
        let e = err(r#"{"type":"launch"}"#);
        assert!(e.to_string().contains("launch"), "{e}");
        assert_eq!(err("{not json").code(), "invalid_json");
        assert_eq!(
            err(r#"{"type":"prompt","text":"x"}"#).code(),
            "invalid_request"
        );
    }

    #[test]
    fn request_id_is_bounded_in_bytes() {
        let ok = "é".repeat(128); // 256 bytes
        let body = format!(r#"{{"type":"prompt","requestId":"{ok}","text":"x"}}"#);
        assert!(parse(body.as_bytes()).is_ok());
        let long = format!("{ok}a");
        let body = format!(r#"{{"type":"prompt","requestId":"{long}","text":"x"}}"#);
        assert!(err(&body).to_string().contains("requestId"));
        assert!(err(r#"{"type":"prompt","requestId":"","text":"x"}"#)
            .to_string()
            .contains("requestId"));
    }

    #[test]
    fn text_and_images_are_bounded() {
        let text = "a".repeat(TEXT_BYTES_MAX + 1);
        let body = format!(r#"{{"type":"prompt","requestId":"r","text":"{text}"}}"#);
        assert!(err(&body).to_string().contains("text"));
        let image = r#"{"mediaType":"image/png","data":"AAAA"}"#;
        let five = [image; 5].join(",");
        let body = format!(r#"{{"type":"prompt","requestId":"r","text":"x","images":[{five}]}}"#);
        assert!(err(&body).to_string().contains("images"));
        let bad = r#"{"type":"prompt","requestId":"r","text":"x","images":[{"mediaType":"text/html","data":"AAAA"}]}"#;
        assert!(err(bad).to_string().contains("mediaType"));
        let bad = r#"{"type":"prompt","requestId":"r","text":"","images":[{"mediaType":"image/png","data":"A"}]}"#;
        assert!(err(bad).to_string().contains("data"));
        assert!(err(r#"{"type":"prompt","requestId":"r","text":""}"#)
            .to_string()
            .contains("text"));
        let ok = r#"{"type":"prompt","requestId":"r","text":"","images":[{"mediaType":"image/png","data":"AAAA"}]}"#;
        assert!(parse(ok.as_bytes()).is_ok());
    }
}
