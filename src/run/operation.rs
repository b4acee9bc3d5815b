//! One operation call's gate (seed: grants are read at every call): the
//! decision whether an operation may run, for a direct tool and for each
//! guest call of an `execute` run alike. The host performs the steps the
//! gate answers: ask the confirm hook, then invoke the operation.
//!
//! ```text
//! begin(ctx, ..)      -> Refused | Confirm(request) | Invoke | Stale
//! confirmed(ctx, yes) -> Refused | Invoke | Stale
//! ```
//!
//! Persist, then act: an operation unsafe to replay is marked started on
//! its call ([`super::tools::mark_started`]) before `Invoke` is answered, so
//! after a crash it is never run again.

use super::tools::{mark_started, ToolOutput};
use crate::capability::door::{self, GuestCall, GuestError, Toolset};
use crate::capability::{
    check_payload, parse_payload, Access, Invocation, Module, Operation, PayloadError,
};
use crate::ctx::Ctx;
use crate::grants::{self, AccessConfig, Decision, Needs};
use crate::model::Image;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

/// The tool call an operation runs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRef {
    pub session_id: String,
    /// The turn's head command, and the attempt that guards its writes.
    pub command_id: String,
    pub attempt: u32,
    pub call_id: String,
}

/// What one guest call of an `execute` run asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum GuestStep {
    /// Answered without running anything (`forage`, or refused).
    Reply(Result<Value, GuestError>),
    /// An operation, through its gate.
    Operation(OperationCall),
}

impl CallRef {
    /// The call as a files patch journal keys it (`files::journal`).
    pub fn journal_key(&self) -> (&str, &str, &str) {
        (&self.session_id, &self.command_id, &self.call_id)
    }

    /// Decodes one `host.call(path, argsJson)` of guest code run under this
    /// call, the run's `ordinal`-th (from 1): discovery is answered here, an
    /// operation is gated like a direct tool.
    pub fn guest_call(
        &self,
        toolset: &Toolset,
        ordinal: u32,
        path: &str,
        args_json: &str,
    ) -> GuestStep {
        match toolset.guest_call(path, args_json) {
            Err(e) => GuestStep::Reply(Err(e)),
            Ok(GuestCall::Search(query)) => GuestStep::Reply(Ok(toolset.search(&query))),
            Ok(GuestCall::Describe(path)) => {
                GuestStep::Reply(toolset.catalog().describe(&path).map_err(GuestError::from))
            }
            Ok(GuestCall::Operation(module, op, args)) => {
                let mut call = OperationCall::new(self.clone(), module, op, args);
                call.ordinal = Some(ordinal);
                GuestStep::Operation(call)
            }
        }
    }
}

/// An operation a tool call asks for, with everything its gate reads.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationCall {
    pub of: CallRef,
    /// Which guest call of its `execute` run it is (from 1); `None` for a
    /// direct tool.
    pub ordinal: Option<u32>,
    pub module_id: String,
    /// The key its grants are read under (`Module::authority`).
    pub grant_key: String,
    /// The operation's source name (what the host or MCP server knows).
    pub operation: String,
    /// Its name in guest code and in messages.
    pub guest_name: String,
    /// The checked arguments, a JSON object.
    pub args: Value,
    pub needs: Needs,
    pub replay_safe: bool,
}

/// What the host does next for an operation call.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// Not run: the model sees why.
    Refused(String),
    /// Ask the host's confirm hook with this request (JSON), then
    /// [`OperationCall::confirmed`].
    Confirm(String),
    /// Run it now.
    Invoke,
    /// The attempt is no longer current: nothing more of this step may run.
    Stale,
}

/// The host's Agent-wide access rules, as a gate reads them.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    pub config: &'a AccessConfig,
    /// Whether the host supplies a confirm hook.
    pub confirm_hook: bool,
}

impl OperationCall {
    pub fn new(of: CallRef, module: &Module, op: &Operation, args: Value) -> OperationCall {
        OperationCall {
            of,
            ordinal: None,
            module_id: module.id.clone(),
            grant_key: module.authority().to_owned(),
            operation: op.name.clone(),
            guest_name: op.guest_name.clone(),
            args,
            needs: Needs {
                write: op.access == Access::Write,
                confirm: op.confirm,
            },
            replay_safe: op.replay_safe,
        }
    }

    /// Decides the call from the grants read now (Agent default, the
    /// Session's delivery).
    pub fn begin(&self, ctx: &mut Ctx<'_>, access: Rules<'_>) -> Gate {
        let delivered = match grants::delivered(ctx, &self.of.session_id) {
            Ok(delivered) => delivered,
            Err(e) => return Gate::Refused(format!("grants unreadable: {e}")),
        };
        // A Computer's commands and files share its grant key; an
        // extension's module is granted by its roster grant key.
        let decision = grants::decide(
            &self.grant_key,
            self.needs,
            access.config,
            delivered.as_ref(),
            access.confirm_hook,
        );
        if let Decision::Deny(why) = decision {
            return Gate::Refused(format!(
                "{}.{} refused: {why}",
                self.module_id, self.guest_name
            ));
        }
        if self.needs.confirm {
            return Gate::Confirm(
                json!({
                    "sessionId": self.of.session_id,
                    "commandId": self.of.command_id,
                    "callId": self.of.call_id,
                    "module": self.module_id,
                    "operation": self.operation,
                    "arguments": self.args,
                })
                .to_string(),
            );
        }
        self.start(ctx)
    }

    /// The confirm hook's answer (`false` for an error or a non-boolean).
    pub fn confirmed(&self, ctx: &mut Ctx<'_>, yes: bool) -> Gate {
        if !yes {
            return Gate::Refused(format!(
                "{}.{}: the host did not confirm this call",
                self.module_id, self.guest_name
            ));
        }
        self.start(ctx)
    }

    fn start(&self, ctx: &mut Ctx<'_>) -> Gate {
        if self.replay_safe {
            return Gate::Invoke;
        }
        let of = &self.of;
        let current = mark_started(ctx, &of.session_id, &of.command_id, of.attempt, &of.call_id)
            .unwrap_or(false);
        if current {
            Gate::Invoke
        } else {
            Gate::Stale
        }
    }

    /// Names this one call: `<commandId>:<callId>` for a direct tool,
    /// `<commandId>:<callId>:<ordinal>` for a guest call. Derived, never
    /// random: a replayed run of the same code names its calls alike.
    pub fn execution_id(&self) -> String {
        let CallRef {
            command_id,
            call_id,
            ..
        } = &self.of;
        match self.ordinal {
            None => format!("{command_id}:{call_id}"),
            Some(n) => format!("{command_id}:{call_id}:{n}"),
        }
    }

    /// What the host's operation receives about the call.
    pub fn invocation(&self, now_ms: i64, timeout_ms: u64) -> Invocation {
        Invocation {
            execution_id: self.execution_id(),
            session_id: self.of.session_id.clone(),
            command_id: self.of.command_id.clone(),
            deadline_ms: now_ms.saturating_add(i64::try_from(timeout_ms).unwrap_or(i64::MAX)),
        }
    }

    /// Why the call produced no result in time.
    pub fn timed_out(&self, timeout_ms: u64) -> String {
        format!(
            "{}.{} did not finish within {timeout_ms} ms",
            self.module_id, self.guest_name
        )
    }
}

/// What an operation answered: its result, its display data (never shown
/// to the model) and the images it returns to the model.
#[derive(Debug, Default)]
pub struct OperationResult {
    pub result: Value,
    pub data: Option<Box<RawValue>>,
    pub images: Vec<Image>,
}

impl From<Value> for OperationResult {
    fn from(result: Value) -> Self {
        OperationResult {
            result,
            ..Default::default()
        }
    }
}

/// Why an operation's reply is no result; its text is the tool's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// The operation's own `{error}`, as it gave it.
    #[error("{0}")]
    Operation(String),
    /// serde's message.
    #[error("the operation's reply is not valid: {0}")]
    NotValid(String),
    #[error("the result {0}")]
    Result(PayloadError),
    #[error("the display data {0}")]
    Data(PayloadError),
    #[error("the result's {0}")]
    Images(crate::model::Refusal),
}

/// An operation's reply `{result, data?, images?}` or `{error}`, bounded.
pub fn operation_reply(reply: &str) -> Result<OperationResult, ReplyError> {
    #[derive(Deserialize)]
    struct Reply {
        #[serde(default)]
        result: Option<Value>,
        #[serde(default)]
        data: Option<Value>,
        #[serde(default)]
        images: Vec<Image>,
        #[serde(default)]
        error: Option<String>,
    }
    let reply: Reply =
        crate::json::from_text(reply).map_err(|e| ReplyError::NotValid(e.to_string()))?;
    if let Some(error) = reply.error {
        return Err(ReplyError::Operation(error));
    }
    let result = reply.result.unwrap_or(Value::Null);
    check_payload(&result).map_err(ReplyError::Result)?;
    let data = match reply.data {
        Some(data) => {
            check_payload(&data).map_err(ReplyError::Data)?;
            RawValue::from_string(data.to_string()).ok()
        }
        None => None,
    };
    Image::check_tool_images(&reply.images).map_err(ReplyError::Images)?;
    Ok(OperationResult {
        result,
        data,
        images: reply.images,
    })
}

/// The sandbox's reply `{result}` or `{error}` as the model's tool result.
pub fn execute_reply(reply: &str) -> ToolOutput {
    match parse_payload(reply) {
        Err(e) => ToolOutput::error(format!("execute: the result {e}")),
        Ok(Value::Object(mut reply)) => match (reply.remove("result"), reply.remove("error")) {
            (_, Some(error)) => ToolOutput::error(match error {
                Value::String(s) => s,
                other => other.to_string(),
            }),
            (Some(result), None) => result_output(result.into()),
            (None, None) => result_output(Value::Null.into()),
        },
        Ok(_) => {
            ToolOutput::error("execute: the sandbox replied with something other than an object")
        }
    }
}

/// An operation's result as the model's tool result.
pub fn result_output(answered: OperationResult) -> ToolOutput {
    match door::result_content(&answered.result) {
        Ok(content) => ToolOutput {
            content,
            is_error: false,
            data: answered.data,
            images: answered.images,
        },
        Err(e) => ToolOutput::error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The operation's own error reaches the model as it gave it; a reply
    /// past the bounds is the runtime's refusal, saying which part.
    #[test]
    fn an_operations_own_error_is_told_apart_from_a_refused_reply() {
        let e = operation_reply(r#"{"error": "no such note"}"#).unwrap_err();
        assert_eq!(e, ReplyError::Operation("no such note".into()));
        assert_eq!(e.to_string(), "no such note");
        let deep = format!(r#"{{"result": {}1{}}}"#, "[".repeat(70), "]".repeat(70));
        let e = operation_reply(&deep).unwrap_err();
        assert!(matches!(e, ReplyError::Result(_)), "{e:?}");
        assert!(e.to_string().starts_with("the result "), "{e}");
        let e = operation_reply("{").unwrap_err();
        assert!(matches!(e, ReplyError::NotValid(_)), "{e:?}");
        assert!(operation_reply(r#"{"result": 1}"#).is_ok());
    }
}
