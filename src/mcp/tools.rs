//! MCP tools as capability operations, and tool results as JSON values.

use super::{protocol, DroppedTool, McpError};
use crate::capability::{check_payload, Access, Module, ModuleSpec, Operation, OperationSpec};
use crate::limits::{MODULE_BYTES_MAX, OPERATIONS_PER_MODULE_MAX};
use crate::model::Image;
use crate::text::shorten;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Accepts tools one by one as pages arrive, so a listing holds no more
/// than the module it builds (`MODULE_BYTES_MAX`).
#[derive(Debug)]
pub(super) struct ToolsBuilder {
    module_id: String,
    operations: Vec<OperationSpec>,
    /// Guest name -> the source name that took it.
    guest_names: BTreeMap<String, String>,
    bytes: usize,
    dropped: Vec<DroppedTool>,
}

impl ToolsBuilder {
    pub(super) fn new(module_id: String) -> ToolsBuilder {
        ToolsBuilder {
            module_id,
            operations: Vec::new(),
            guest_names: BTreeMap::new(),
            bytes: 0,
            dropped: Vec::new(),
        }
    }

    /// Tool `index` of the listing: taken, or dropped with the reason.
    pub(super) fn push(&mut self, index: usize, tool: &Value) {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            return self.drop(format!("tools[{index}]"), "it has no string `name`".into());
        };
        let read_only = tool
            .get("annotations")
            .and_then(|a| a.get("readOnlyHint"))
            .and_then(Value::as_bool)
            == Some(true);
        let spec = OperationSpec {
            name: name.to_owned(),
            description: tool
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            input_schema: tool
                .get("inputSchema")
                .cloned()
                .unwrap_or_else(|| json!({ "type": "object" })),
            access: if read_only {
                Access::Read
            } else {
                Access::Write
            },
            confirm: false,
            replay_safe: read_only,
        };
        let operation = match Operation::from_spec(spec.clone()) {
            Ok(operation) => operation,
            Err(e) => return self.drop(shorten(name).to_owned(), e.0),
        };
        if let Some(other) = self.guest_names.get(&operation.guest_name) {
            let reason = format!(
                "it maps to guest name `{}`, as does tool `{}` listed before it",
                operation.guest_name,
                shorten(other)
            );
            return self.drop(shorten(name).to_owned(), reason);
        }
        if self.operations.len() == OPERATIONS_PER_MODULE_MAX {
            let reason = format!(
                "module `{}` already holds {OPERATIONS_PER_MODULE_MAX} operations",
                self.module_id
            );
            return self.drop(shorten(name).to_owned(), reason);
        }
        let bytes = operation.description.len() + operation.input.source_bytes();
        if self.bytes + bytes > MODULE_BYTES_MAX {
            let reason = format!(
                "its description and input schema take {bytes} bytes, past the \
                 {MODULE_BYTES_MAX} bytes of module `{}`",
                self.module_id
            );
            return self.drop(shorten(name).to_owned(), reason);
        }
        self.bytes += bytes;
        self.guest_names
            .insert(operation.guest_name, name.to_owned());
        self.operations.push(spec);
    }

    fn drop(&mut self, name: String, reason: String) {
        self.dropped.push(DroppedTool { name, reason });
    }

    /// The module (checked: `Module::from_spec` accepts it) and the
    /// dropped tools.
    pub(super) fn finish(
        self,
    ) -> Result<(ModuleSpec, Vec<DroppedTool>), crate::capability::CapabilityError> {
        let spec = ModuleSpec {
            id: self.module_id,
            operations: self.operations,
        };
        Module::from_spec(spec.clone())?;
        Ok((spec, self.dropped))
    }
}

/// A `tools/call` result as the value guest code gets, and the images of
/// its content, for the model to see.
pub(super) fn call_result(result: Value) -> Result<(Value, Vec<Image>), McpError> {
    let Value::Object(mut map) = result else {
        return Err(protocol("tools/call result is not an object"));
    };
    let is_error = match map.get("isError") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(protocol("tools/call `isError` is not a boolean")),
    };
    let images = match map.get_mut("content") {
        Some(Value::Array(content)) => take_images(content),
        _ => Vec::new(),
    };
    let value = match map.remove("structuredContent") {
        Some(structured) if !is_error && !structured.is_null() => structured,
        _ => json!({
            "isError": is_error,
            "content": map.remove("content").unwrap_or_else(|| json!([])),
        }),
    };
    check_payload(&value).map_err(|e| protocol(format!("tool result: {e}")))?;
    Ok((value, images))
}

/// The image blocks of a result's content as images, in order, while they
/// fit a result's bounds: each taken loses its `data` (the model sees the
/// image itself); one that does not fit keeps, in place of its data, why
/// it was left out.
fn take_images(content: &mut [Value]) -> Vec<Image> {
    let mut images = Vec::new();
    for block in content {
        let Some(block) = block.as_object_mut() else {
            continue;
        };
        if block.get("type").and_then(Value::as_str) != Some("image") {
            continue;
        }
        let field = |name: &str| block.get(name).and_then(Value::as_str).unwrap_or_default();
        images.push(Image {
            media_type: field("mimeType").to_owned(),
            data: field("data").to_owned(),
        });
        match Image::check_tool_images(&images) {
            Ok(()) => {
                block.remove("data");
            }
            Err(why) => {
                images.pop();
                block.insert("data".into(), json!(format!("left out: {why}")));
            }
        }
    }
    images
}
