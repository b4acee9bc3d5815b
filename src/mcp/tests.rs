use super::*;
use serde_json::json;

const URL: &str = "https://mcp.example.com/mcp?key=url-secret";
const TOKEN: &str = "Bearer sk-live-very-secret-token";
const SESSION: &str = "5f1d2c3a-9b8e-4d7f-a6c5-0e1f2a3b4c5d";

fn conn() -> McpConnection {
    McpConnection::new(
        URL,
        "notes",
        "0.1.0",
        vec![("Authorization".into(), TOKEN.into())],
    )
    .unwrap()
}

fn sse(messages: &[Value]) -> String {
    messages
        .iter()
        .map(|m| format!("event: message\ndata: {m}\n\n"))
        .collect()
}

fn resp<'a>(
    status: u16,
    ct: &'a str,
    headers: &'a [(String, String)],
    body: &'a str,
) -> McpResponse<'a> {
    McpResponse {
        status,
        content_type: (!ct.is_empty()).then_some(ct),
        headers,
        body: body.as_bytes(),
    }
}

fn init_result(version: &str) -> Value {
    json!({"result": {"protocolVersion": version,
        "capabilities": {"tools": {"listChanged": true}},
        "serverInfo": {"name": "notes-server", "version": "1.2.0"}},
        "jsonrpc": "2.0", "id": 1})
}

fn header<'a>(req: &'a Outbound, name: &str) -> Option<&'a str> {
    req.headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn body(req: &Outbound) -> Value {
    serde_json::from_str(&req.body).unwrap()
}

fn send(step: Step) -> Outbound {
    match step {
        Step::Send(r) => r,
        Step::Ready(t) => panic!("expected a request, got {t:?}"),
    }
}

/// Initialize (SSE, with a session id) and the 202 for the notification;
/// returns the first tools/list request.
fn handshake(c: &mut McpConnection) -> Outbound {
    let init = c.start();
    assert_eq!(header(&init, "MCP-Protocol-Version"), None);
    let headers = vec![("mcp-session-id".to_string(), SESSION.to_string())];
    let stream = sse(&[init_result("2025-06-18")]);
    let note = send(
        c.on_response(resp(200, "text/event-stream", &headers, &stream))
            .unwrap(),
    );
    assert_eq!(
        body(&note),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    );
    send(c.on_response(resp(202, "", &[], "")).unwrap())
}

fn tool(name: &str, read_only: Option<bool>) -> Value {
    let mut t = json!({"name": name, "description": format!("{name} tool"),
        "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}},
                        "required": ["id"], "additionalProperties": false,
                        "$schema": "http://json-schema.org/draft-07/schema#"}});
    if let Some(hint) = read_only {
        t["annotations"] = json!({"readOnlyHint": hint});
    }
    t
}

fn ready(c: &mut McpConnection, tools: Vec<Value>) -> McpTools {
    let list = handshake(c);
    let id = body(&list)["id"].clone();
    let page = json!({"result": {"tools": tools}, "jsonrpc": "2.0", "id": id}).to_string();
    match c
        .on_response(resp(200, "application/json", &[], &page))
        .unwrap()
    {
        Step::Ready(t) => t,
        Step::Send(r) => panic!("unexpected {r:?}"),
    }
}

#[test]
fn initialize_request_and_negotiation() {
    let mut c = conn();
    let init = c.start();
    assert_eq!(init.method, "POST");
    assert_eq!(init.url, URL);
    assert_eq!(
        header(&init, "Accept"),
        Some("application/json, text/event-stream")
    );
    assert_eq!(header(&init, "Content-Type"), Some("application/json"));
    assert_eq!(header(&init, "Authorization"), Some(TOKEN));
    let b = body(&init);
    assert_eq!(b["method"], "initialize");
    assert_eq!(b["params"]["protocolVersion"], "2025-11-25");
    assert_eq!(b["params"]["capabilities"], json!({}));
    assert_eq!(
        b["params"]["clientInfo"],
        json!({"name": "shiitake", "version": "0.1.0"})
    );

    // An older server answering 2025-03-26 is accepted.
    let body = init_result("2025-03-26").to_string();
    let note = send(
        c.on_response(resp(200, "application/json", &[], &body))
            .unwrap(),
    );
    assert_eq!(c.protocol_version(), Some("2025-03-26"));
    assert_eq!(header(&note, "MCP-Protocol-Version"), Some("2025-03-26"));
    assert!(!c.has_session());
    assert_eq!(header(&note, "Mcp-Session-Id"), None);

    // Any other version is refused, naming both supported.
    let mut c = conn();
    c.start();
    let body = init_result("2024-11-05").to_string();
    let e = c
        .on_response(resp(200, "application/json", &[], &body))
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("2024-11-05")
            && text.contains("2025-11-25")
            && text.contains("2025-06-18")
            && text.contains("2025-03-26"),
        "{text}"
    );
    assert!(c.call_tool("x", &json!({})).is_err());
}

#[test]
fn session_id_tracked_and_pagination() {
    let mut c = conn();
    let first = handshake(&mut c);
    assert!(c.has_session());
    assert_eq!(header(&first, "Mcp-Session-Id"), Some(SESSION));
    assert_eq!(header(&first, "MCP-Protocol-Version"), Some("2025-06-18"));
    let b = body(&first);
    assert_eq!(b["method"], "tools/list");
    assert_eq!(b["params"], json!({}));

    let page1 = sse(&[
        json!({"method": "notifications/message", "params": {"level": "info", "data": "listing"}, "jsonrpc": "2.0"}),
        json!({"result": {"tools": [tool("search_notes", Some(true))], "nextCursor": "page-2"},
               "jsonrpc": "2.0", "id": b["id"]}),
    ]);
    let second = send(
        c.on_response(resp(200, "text/event-stream", &[], &page1))
            .unwrap(),
    );
    let b2 = body(&second);
    assert_eq!(b2["params"], json!({"cursor": "page-2"}));
    assert_ne!(b2["id"], b["id"]);
    assert_eq!(header(&second, "Mcp-Session-Id"), Some(SESSION));

    let page2 =
        json!({"result": {"tools": [tool("createNote", None)]}, "jsonrpc": "2.0", "id": b2["id"]})
            .to_string();
    let Step::Ready(tools) = c
        .on_response(resp(200, "application/json; charset=utf-8", &[], &page2))
        .unwrap()
    else {
        panic!("not ready")
    };
    assert_eq!(
        tools.server,
        ServerInfo {
            name: "notes-server".into(),
            version: "1.2.0".into()
        }
    );
    assert_eq!(tools.module.id, "mcp.notes");
    let ops = &tools.module.operations;
    assert_eq!(ops.len(), 2);
    assert_eq!(
        (ops[0].name.as_str(), ops[0].access, ops[0].replay_safe),
        ("search_notes", Access::Read, true)
    );
    assert_eq!(
        (ops[1].name.as_str(), ops[1].access, ops[1].replay_safe),
        ("createNote", Access::Write, false)
    );
    assert_eq!(ops[1].description, "createNote tool");
    assert!(tools.dropped.is_empty());
    let module = crate::capability::Module::from_spec(tools.module.clone()).unwrap();
    assert_eq!(module.operations[1].guest_name, "create_note");

    // Tool call carries the session and version headers.
    let call = c.call_tool("createNote", &json!({"id": "n1"})).unwrap();
    assert_eq!(
        body(&call.request)["params"],
        json!({"name": "createNote", "arguments": {"id": "n1"}, "_meta": {"progressToken": call.id}})
    );
    assert_eq!(header(&call.request, "Mcp-Session-Id"), Some(SESSION));
    assert_eq!(header(&call.request, "Authorization"), Some(TOKEN));
}

use crate::capability::Access;

#[test]
fn read_only_hint_mapping_and_dropped_tools() {
    let mut c = conn();
    let mut no_desc = tool("plain", Some(false));
    no_desc.as_object_mut().unwrap().remove("description");
    let tools = ready(
        &mut c,
        vec![
            tool("get", Some(true)),
            no_desc,
            tool("delete", None),
            tool("Get", None),
            json!({"x": 1}),
        ],
    );
    let ops = &tools.module.operations;
    assert_eq!(
        ops.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(),
        ["get", "plain"]
    );
    assert_eq!(ops[0].access, Access::Read);
    assert_eq!(ops[1].access, Access::Write);
    assert_eq!(ops[1].description, "");
    let dropped: Vec<&str> = tools.dropped.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(dropped, ["delete", "Get", "tools[4]"]);
    assert!(
        tools.dropped[0].reason.contains("reserved word"),
        "{:?}",
        tools.dropped
    );
    assert!(
        tools.dropped[1].reason.contains("as does tool `get`"),
        "{:?}",
        tools.dropped
    );
}

#[test]
fn tool_results_structured_and_content() {
    let mut c = conn();
    ready(&mut c, vec![tool("get", Some(true))]);
    let call = c.call_tool("get", &json!({"id": "1"})).unwrap();
    let id = call.id;
    let answer = |result: Value| sse(&[json!({"result": result, "jsonrpc": "2.0", "id": id})]);

    let body = answer(
        json!({"content": [{"type": "text", "text": "{\"title\":\"a\"}"}],
                             "structuredContent": {"title": "a"}}),
    );
    let v = c
        .tool_result(id, resp(200, "text/event-stream", &[], &body))
        .unwrap();
    assert_eq!(v, (json!({"title": "a"}), Vec::new()));

    let body = answer(json!({"content": [{"type": "text", "text": "hello"}]}));
    let v = c
        .tool_result(id, resp(200, "text/event-stream", &[], &body))
        .unwrap();
    assert_eq!(
        v,
        (
            json!({"isError": false, "content": [{"type": "text", "text": "hello"}]}),
            Vec::new()
        )
    );

    let body = answer(
        json!({"content": [{"type": "text", "text": "no such note"}],
                             "structuredContent": {"x": 1}, "isError": true}),
    );
    let v = c
        .tool_result(id, resp(200, "text/event-stream", &[], &body))
        .unwrap();
    assert_eq!(
        v,
        (
            json!({"isError": true, "content": [{"type": "text", "text": "no such note"}]}),
            Vec::new()
        )
    );

    // Over the payload bound.
    let big = "x".repeat(300_000);
    let body = answer(json!({"content": [{"type": "text", "text": big}]}));
    let e = c
        .tool_result(id, resp(200, "text/event-stream", &[], &body))
        .unwrap_err();
    assert!(
        e.to_string().contains("tool result: payload is larger"),
        "{e}"
    );
    let mut deep = json!(1);
    for _ in 0..70 {
        deep = json!([deep]);
    }
    let body = answer(json!({"structuredContent": {"d": deep}, "content": []}));
    let e = c
        .tool_result(
            id,
            resp(
                200,
                "application/json",
                &[],
                body.replace("event: message\ndata: ", "").trim(),
            ),
        )
        .unwrap_err();
    assert!(e.to_string().contains("deeper than 64"), "{e}");
}

#[test]
fn image_content_goes_to_the_model_as_images_within_the_bounds() {
    use crate::limits::TOOL_RESULT_IMAGES_MAX;
    use crate::model::Image;
    let mut c = conn();
    ready(&mut c, vec![tool("get", Some(true))]);
    let id = c.call_tool("get", &json!({})).unwrap().id;
    let png = json!({"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="});
    let mut content = vec![
        json!({"type": "text", "text": "pictures"}),
        json!({"type": "image", "mimeType": "image/svg+xml", "data": "PHN2Zz4="}),
    ];
    content.extend(std::iter::repeat_n(png, TOOL_RESULT_IMAGES_MAX + 1));
    let body = sse(&[
        json!({"result": {"content": content, "structuredContent": {"n": 6}},
                            "jsonrpc": "2.0", "id": id}),
    ]);
    let (value, images) = c
        .tool_result(id, resp(200, "text/event-stream", &[], &body))
        .unwrap();
    // The structured content is the value; the images come beside it.
    assert_eq!(value, json!({"n": 6}));
    assert_eq!(
        images,
        vec![
            Image {
                media_type: "image/png".into(),
                data: "iVBORw0KGgo=".into()
            };
            TOOL_RESULT_IMAGES_MAX
        ]
    );
    // Without structured content, the blocks stay, their data taken or
    // replaced by why it was left out.
    let body = sse(&[json!({"result": {"content": content}, "jsonrpc": "2.0", "id": id})]);
    let (value, images) = c
        .tool_result(id, resp(200, "text/event-stream", &[], &body))
        .unwrap();
    assert_eq!(images.len(), TOOL_RESULT_IMAGES_MAX);
    let blocks = value["content"].as_array().unwrap();
    assert!(blocks[1]["data"]
        .as_str()
        .unwrap()
        .starts_with("left out: images[0].mediaType: must be one of"));
    assert_eq!(blocks[2], json!({"type": "image", "mimeType": "image/png"}));
    assert_eq!(
        blocks[6]["data"],
        "left out: images: at most 4 per tool result, got 5"
    );
}

#[test]
fn progress_notifications_of_the_call_are_read_as_the_stream_arrives() {
    let mut c = conn();
    ready(&mut c, vec![tool("get", Some(true))]);
    let call = c.call_tool("get", &json!({})).unwrap();
    let mut progress = super::CallProgress::new(&call);
    let note = |token: Value, n: u64| {
        json!({"jsonrpc": "2.0", "method": "notifications/progress",
               "params": {"progressToken": token, "progress": n, "total": 3, "message": "counting"}})
    };
    let stream = sse(&[
        note(json!(call.id), 1),
        note(json!(call.id + 1), 9),
        json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}}),
        note(json!(call.id), 2),
        json!({"jsonrpc": "2.0", "id": call.id, "result": {"content": []}}),
    ]);
    // Any chunk boundary: split in the middle of the first event.
    let (a, b) = stream.as_bytes().split_at(40);
    let mut reports = progress.push(a).reports;
    assert!(reports.is_empty());
    let rest = progress.push(b);
    assert!(rest.answered && rest.replies.is_empty());
    reports.extend(rest.reports);
    assert_eq!(
        reports,
        [
            r#"{"message":"counting","progress":1,"total":3}"#,
            r#"{"message":"counting","progress":2,"total":3}"#
        ]
    );
}

/// A server may close a call's stream once it sent an event id (SEP-1699):
/// the call is resumed with a GET carrying `Last-Event-ID`, after the
/// stream's `retry:`, the same session and credentials; the resumed stream
/// (a priming event, then the response) gives the result. Bounded: at most
/// `MCP_SSE_RESUMES_MAX` resumptions, `retry:` at most
/// `MCP_SSE_RETRY_MS_MAX`; no event id, a response already read, a JSON
/// body or an odd id: nothing to resume.
#[test]
fn a_call_stream_closed_before_its_response_is_resumed_with_last_event_id() {
    let mut c = conn();
    ready(&mut c, vec![tool("get", Some(true))]);
    let call = c.call_tool("get", &json!({})).unwrap();
    let mut progress = super::CallProgress::new(&call);
    let cut = "id: e-1\nretry: 500\ndata: \n\n";
    assert!(!progress.push(cut.as_bytes()).answered);
    let resume = c
        .resume(&mut progress, resp(200, "text/event-stream", &[], cut))
        .unwrap();
    assert_eq!(resume.after_ms, 500);
    let get = &resume.request;
    assert_eq!(
        (get.method.as_str(), get.url.as_str(), get.body.as_str()),
        ("GET", URL, "")
    );
    assert_eq!(header(get, "Last-Event-ID"), Some("e-1"));
    assert_eq!(header(get, "Accept"), Some("text/event-stream"));
    assert_eq!(header(get, "Mcp-Session-Id"), Some(SESSION));
    assert_eq!(header(get, "MCP-Protocol-Version"), Some("2025-06-18"));
    assert_eq!(header(get, "Authorization"), Some(TOKEN));
    // The resumed stream: primed, then the response (the server may hold it
    // open: the response read, the host stops).
    let result = json!({"jsonrpc": "2.0", "id": call.id, "result": {"content": [{"type": "text", "text": "done"}]}});
    let resumed =
        format!("id: e-2\nretry: 500\ndata: \n\nevent: message\nid: e-3\ndata: {result}\n\n");
    assert!(
        progress.resumed(),
        "the server accepted it: never sent again"
    );
    assert!(progress.push(resumed.as_bytes()).answered);
    let r = resp(200, "text/event-stream", &[], &resumed);
    assert!(c.resume(&mut progress, r).is_none(), "answered");
    let (value, _) = c.tool_result(call.id, r).unwrap();
    assert_eq!(value["content"][0]["text"], "done");

    // Bounds: a stream closed again and again is resumed a bounded number
    // of times; a huge `retry:` is clamped; no `retry:` waits the default.
    let call = c.call_tool("get", &json!({})).unwrap();
    let mut progress = super::CallProgress::new(&call);
    let cut = "retry: 99999999999\nid: e-1\ndata: \n\n";
    let mut resumes = 0;
    loop {
        progress.push(cut.as_bytes());
        let Some(r) = c.resume(&mut progress, resp(200, "text/event-stream", &[], cut)) else {
            break;
        };
        assert_eq!(r.after_ms, MCP_SSE_RETRY_MS_MAX);
        resumes += 1;
    }
    assert_eq!(resumes, MCP_SSE_RESUMES_MAX);
    let e = c
        .tool_result(call.id, resp(200, "text/event-stream", &[], cut))
        .unwrap_err();
    assert!(e.to_string().contains("holds no response"), "{e}");
    let call = c.call_tool("get", &json!({})).unwrap();
    let mut progress = super::CallProgress::new(&call);
    progress.push(b"id: e-1\ndata: \n\n");
    let r = c.resume(
        &mut progress,
        resp(200, "text/event-stream", &[], "id: e-1\n\n"),
    );
    assert_eq!(r.unwrap().after_ms, MCP_SSE_RETRY_MS);

    // Nothing to resume: no event id, a JSON body, an error status, an id
    // that is no header value.
    for (status, ct, stream) in [
        (200, "text/event-stream", "data: \n\n".to_owned()),
        (200, "application/json", "id: e-1\n\n".to_owned()),
        (500, "text/event-stream", "id: e-1\n\n".to_owned()),
        (200, "text/event-stream", "id: a\u{7f}b\n\n".to_owned()),
        (
            200,
            "text/event-stream",
            format!("id: {}\n\n", "x".repeat(MCP_EVENT_ID_BYTES_MAX + 1)),
        ),
    ] {
        let call = c.call_tool("get", &json!({})).unwrap();
        let mut progress = super::CallProgress::new(&call);
        progress.push(stream.as_bytes());
        assert!(
            c.resume(&mut progress, resp(status, ct, &[], &stream))
                .is_none(),
            "{stream:?}"
        );
    }
}

/// The server's requests on a call's stream are answered, never left
/// waiting: `ping` with an empty result, anything else (sampling,
/// elicitation, roots: capabilities this client does not declare) with a
/// JSON-RPC -32601, POSTed like the call (session, credentials); at most
/// `MCP_SERVER_REQUESTS_MAX` a call.
#[test]
fn server_requests_on_a_call_stream_are_answered() {
    let mut c = conn();
    ready(&mut c, vec![tool("get", Some(true))]);
    let call = c.call_tool("get", &json!({})).unwrap();
    let mut progress = super::CallProgress::new(&call);
    let stream = sse(&[
        json!({"jsonrpc": "2.0", "id": "s-1", "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": 7, "method": "elicitation/create", "params": {"message": "name?"}}),
        json!({"jsonrpc": "2.0", "id": 8, "method": "sampling/createMessage", "params": {}}),
    ]);
    let chunk = progress.push(stream.as_bytes());
    assert!(!chunk.answered);
    let [ping, elicit, sample] = &chunk.replies[..] else {
        panic!("{:?}", chunk.replies);
    };
    assert_eq!(
        body(ping),
        json!({"jsonrpc": "2.0", "id": "s-1", "result": {}})
    );
    for (reply, id) in [(elicit, 7), (sample, 8)] {
        let b = body(reply);
        assert_eq!(
            (b["id"].clone(), b["error"]["code"].clone()),
            (json!(id), json!(-32601))
        );
        assert!(b.get("result").is_none());
        assert_eq!(reply.method, "POST");
        assert_eq!(header(reply, "Mcp-Session-Id"), Some(SESSION));
        assert_eq!(header(reply, "Authorization"), Some(TOKEN));
        assert_eq!(header(reply, "Content-Type"), Some("application/json"));
    }
    // A message with a null id is no request to answer; an error with a
    // null id is the call's answer (the server could not read its id).
    let odd = sse(&[json!({"jsonrpc": "2.0", "id": null, "method": "ping"})]);
    assert!(progress.push(odd.as_bytes()).replies.is_empty());
    let failed = sse(&[
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse"}}),
    ]);
    assert!(progress.push(failed.as_bytes()).answered);
    let flood = sse(&vec![
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
        MCP_SERVER_REQUESTS_MAX
    ]);
    assert_eq!(
        progress.push(flood.as_bytes()).replies.len(),
        MCP_SERVER_REQUESTS_MAX - 3
    );
}

#[test]
fn statuses() {
    let mut c = conn();
    ready(&mut c, vec![tool("get", Some(true))]);
    let id = c.call_tool("get", &json!({})).unwrap().id;
    for status in [301, 307, 308] {
        let e = c
            .tool_result(
                id,
                resp(
                    status,
                    "",
                    &[("location".into(), "https://evil".into())],
                    "",
                ),
            )
            .unwrap_err();
        assert_eq!(e, McpError::Redirect { status });
        assert!(e.to_string().contains("redirects are refused"));
    }
    for status in [401, 403] {
        let e = c.tool_result(id, resp(status, "", &[], "")).unwrap_err();
        assert_eq!(e, McpError::Credentials { status });
    }
    let bad = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},"id":null}"#;
    let e = c
        .tool_result(id, resp(400, "application/json", &[], bad))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "MCP server answered HTTP 400: Bad Request: Server not initialized (JSON-RPC error -32000)"
    );
    let e = c
        .tool_result(id, resp(500, "text/plain", &[], "oops"))
        .unwrap_err();
    assert_eq!(
        e,
        McpError::Status {
            status: 500,
            detail: String::new()
        }
    );
    // 404 with a session: expired; the connection must start again.
    let e = c.tool_result(id, resp(404, "", &[], "")).unwrap_err();
    assert_eq!(e, McpError::SessionExpired);
    assert!(!c.has_session());
    assert!(matches!(
        c.call_tool("get", &json!({})),
        Err(McpError::Usage(_))
    ));
    let init = c.start();
    assert_eq!(header(&init, "Mcp-Session-Id"), None);
    // 404 without a session: a plain status error.
    let mut c = conn();
    c.start();
    let e = c.on_response(resp(404, "", &[], "")).unwrap_err();
    assert_eq!(
        e,
        McpError::Status {
            status: 404,
            detail: String::new()
        }
    );
}

#[test]
fn json_rpc_errors_and_malformed_responses() {
    let mut c = conn();
    ready(&mut c, vec![tool("get", Some(true))]);
    let id = c.call_tool("get", &json!({})).unwrap().id;
    let long = "m".repeat(5_000);
    let err =
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": long}}).to_string();
    match c
        .tool_result(id, resp(200, "application/json", &[], &err))
        .unwrap_err()
    {
        McpError::Rpc { code, message } => {
            assert_eq!(code, -32602);
            assert!(message.len() <= 1_024 && message.ends_with('…'));
        }
        other => panic!("{other:?}"),
    }
    let cases: &[(&str, &str, &str)] = &[
        ("application/json", "{not json", "not valid JSON"),
        (
            "application/json",
            r#"{"jsonrpc":"1.0","id":ID,"result":{}}"#,
            "wrong jsonrpc version",
        ),
        (
            "application/json",
            r#"{"id":ID,"result":{}}"#,
            "wrong jsonrpc version",
        ),
        (
            "application/json",
            r#"{"jsonrpc":"2.0","id":999,"result":{}}"#,
            "id mismatch: expected ID, got 999",
        ),
        ("application/json", r#"[1]"#, "not an object"),
        (
            "application/json",
            r#"{"jsonrpc":"2.0","id":ID}"#,
            "neither `result` nor `error`",
        ),
        (
            "text/event-stream",
            "event: message\ndata: {oops\n\n",
            "malformed event stream",
        ),
        (
            "text/event-stream",
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":999,\"result\":{}}\n\n",
            "id mismatch",
        ),
        (
            "text/event-stream",
            ": ping\n\n",
            "event stream holds no response to request ID",
        ),
        ("text/html", "<html>", "unexpected content type `text/html`"),
        ("", "", "without a response"),
    ];
    for (ct, body, expect) in cases {
        let body = body.replace("ID", &id.to_string());
        let expect = expect.replace("ID", &id.to_string());
        let e = c.tool_result(id, resp(200, ct, &[], &body)).unwrap_err();
        assert!(matches!(e, McpError::Protocol(_)), "{e:?}");
        assert!(e.to_string().contains(&expect), "{e} !~ {expect}");
    }
    // An SSE line past the decoder's bound.
    let huge = format!(
        "data: {}\n\n",
        "x".repeat(crate::limits::SSE_LINE_BYTES_MAX + 1)
    );
    let e = c
        .tool_result(id, resp(200, "text/event-stream", &[], &huge))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "MCP protocol error: malformed event stream: provider stream: an SSE line exceeds 1048576 bytes"
    );
    // Oversized body.
    let over = " ".repeat(crate::limits::MCP_RESPONSE_BYTES_MAX + 1);
    let e = c
        .tool_result(id, resp(200, "application/json", &[], &over))
        .unwrap_err();
    assert!(
        e.to_string().contains("response exceeds 4194304 bytes"),
        "{e}"
    );
}

#[test]
fn handshake_errors_and_bad_session_ids() {
    let mut c = conn();
    c.start();
    let err = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"Invalid Request"}}"#;
    let e = c
        .on_response(resp(200, "application/json", &[], err))
        .unwrap_err();
    assert_eq!(
        e,
        McpError::Rpc {
            code: -32600,
            message: "Invalid Request".into()
        }
    );
    // Nothing to resume.
    assert!(matches!(
        c.on_response(resp(202, "", &[], "")),
        Err(McpError::Usage(_))
    ));

    let id = body(&c.start())["id"].clone();
    let headers = vec![("Mcp-Session-Id".to_string(), "bad id\u{7f}".to_string())];
    let mut init = init_result("2025-06-18");
    init["id"] = id;
    let body = init.to_string();
    let e = c
        .on_response(resp(200, "application/json", &headers, &body))
        .unwrap_err();
    assert!(e.to_string().contains("Mcp-Session-Id"), "{e}");
    assert!(!c.has_session());
}

#[test]
fn listing_bounds() {
    let mut c = conn();
    let mut req = handshake(&mut c);
    for page in 0..MCP_TOOLS_PAGES_MAX {
        let id = body(&req)["id"].clone();
        let b = json!({"result": {"tools": [tool(&format!("t{page}"), None)], "nextCursor": format!("c{page}")},
                       "jsonrpc": "2.0", "id": id}).to_string();
        match c.on_response(resp(200, "application/json", &[], &b)) {
            Ok(step) => req = send(step),
            Err(e) => {
                assert_eq!(page, MCP_TOOLS_PAGES_MAX - 1);
                assert!(e.to_string().contains("more than 20 pages"), "{e}");
            }
        }
    }
    // Still ready: may list again.
    let req = c.list_tools().unwrap();
    let many: Vec<Value> = (0..=MCP_TOOLS_MAX)
        .map(|i| tool(&format!("t{i}"), None))
        .collect();
    let b =
        json!({"result": {"tools": many}, "jsonrpc": "2.0", "id": body(&req)["id"]}).to_string();
    let e = c
        .on_response(resp(200, "application/json", &[], &b))
        .unwrap_err();
    assert!(e.to_string().contains("more than 1000 tools"), "{e}");
    // Past the module's operation bound: the rest is dropped.
    let req = c.list_tools().unwrap();
    let many: Vec<Value> = (0..300).map(|i| tool(&format!("t{i}"), None)).collect();
    let b =
        json!({"result": {"tools": many}, "jsonrpc": "2.0", "id": body(&req)["id"]}).to_string();
    let Step::Ready(tools) = c
        .on_response(resp(200, "application/json", &[], &b))
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(tools.module.operations.len(), 256);
    assert_eq!(tools.dropped.len(), 44);
}

#[test]
fn credentials_never_leak() {
    let mut c = conn();
    let req = c.start();
    for shown in [format!("{req:?}"), format!("{c:?}")] {
        assert!(
            !shown.contains("very-secret") && !shown.contains("url-secret"),
            "{shown}"
        );
        assert!(shown.contains("Authorization") || shown.contains("extra_header_names"));
    }
    // A server echoing the credential in errors (status detail, RPC error,
    // protocol error) has it redacted.
    let echo = format!(
        r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":-1,"message":"bad token {TOKEN}"}}}}"#
    );
    let e = c
        .on_response(resp(200, "application/json", &[], &echo))
        .unwrap_err();
    let bare = TOKEN.trim_start_matches("Bearer ");
    let echo_bare = echo.replace(TOKEN, bare);
    let mut c = conn();
    c.start();
    let e2 = c
        .on_response(resp(200, "application/json", &[], &echo_bare))
        .unwrap_err();
    let mut c = conn();
    c.start();
    let e3 = c
        .on_response(resp(400, "application/json", &[], &echo))
        .unwrap_err();
    let mut c = conn();
    c.start();
    let wrong = format!(r#"{{"jsonrpc":"{bare}","id":1,"result":{{}}}}"#);
    let e4 = c
        .on_response(resp(200, "application/json", &[], &wrong))
        .unwrap_err();
    for e in [e, e2, e3, e4] {
        for shown in [e.to_string(), format!("{e:?}")] {
            assert!(!shown.contains("very-secret"), "{shown}");
            assert!(shown.contains("<redacted>"), "{shown}");
        }
    }
    // The tools listing holds no header either.
    let mut c = conn();
    let tools = ready(&mut c, vec![tool("get", None)]);
    assert!(!format!("{tools:?}").contains("very-secret"));
    // Bad extra headers are refused without their value.
    let e = McpConnection::new(
        URL,
        "notes",
        "1",
        vec![("X-Key".into(), "s3cr3t\r\nX: y".into())],
    )
    .unwrap_err();
    assert!(!e.to_string().contains("s3cr3t"), "{e}");
    assert!(McpConnection::new(
        URL,
        "notes",
        "1",
        vec![("mcp-session-id".into(), "x".into())]
    )
    .is_err());
    assert!(McpConnection::new(URL, "Not Valid", "1", vec![]).is_err());
    assert!(McpConnection::new(URL, "class", "1", vec![]).is_err());
}

#[test]
fn server_without_tools_capability() {
    let mut c = conn();
    c.start();
    let body = json!({"result": {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "serverInfo": {"name": "s", "version": "1"}}, "jsonrpc": "2.0", "id": 1}).to_string();
    send(
        c.on_response(resp(200, "application/json", &[], &body))
            .unwrap(),
    );
    let Step::Ready(tools) = c.on_response(resp(202, "", &[], "")).unwrap() else {
        panic!()
    };
    assert!(tools.module.operations.is_empty());
}

/// A handshake on a started connection (`init` its `initialize`) with the
/// tools listed at once.
fn renew(c: &mut McpConnection, init: Outbound, tools: Vec<Value>) -> McpTools {
    let mut result = init_result("2025-06-18");
    result["id"] = body(&init)["id"].clone();
    let headers = vec![("mcp-session-id".to_string(), "second-session".to_string())];
    let stream = sse(&[result]);
    send(
        c.on_response(resp(200, "text/event-stream", &headers, &stream))
            .unwrap(),
    );
    let list = send(c.on_response(resp(202, "", &[], "")).unwrap());
    let page = json!({"result": {"tools": tools}, "jsonrpc": "2.0", "id": body(&list)["id"]});
    match c
        .on_response(resp(200, "application/json", &[], &page.to_string()))
        .unwrap()
    {
        Step::Ready(t) => t,
        Step::Send(r) => panic!("unexpected {r:?}"),
    }
}

#[test]
fn the_tools_version_counts_list_changed_notifications_and_new_sessions() {
    let mut c = conn();
    let listed = ready(&mut c, vec![tool("get", Some(true))]);
    assert!(listed.list_changed, "the server declared tools.listChanged");
    assert_eq!((listed.tools_version, c.tools_version()), (1, 1));
    let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    let other = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {}});
    let answer = |id: u64| json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}});
    // On a call's event stream, before its response.
    let id = c.call_tool("get", &json!({})).unwrap().id;
    let stream = sse(&[other.clone(), changed.clone(), answer(id)]);
    c.tool_result(id, resp(200, "text/event-stream", &[], &stream))
        .unwrap();
    assert_eq!(c.tools_version(), 2);
    // In a JSON batch.
    let id = c.call_tool("get", &json!({})).unwrap().id;
    let batch = json!([changed, answer(id)]).to_string();
    c.tool_result(id, resp(200, "application/json", &[], &batch))
        .unwrap();
    assert_eq!(c.tools_version(), 3);
    // Other notifications, and a request by that name, are no change.
    let id = c.call_tool("get", &json!({})).unwrap().id;
    let request =
        json!({"jsonrpc": "2.0", "id": "s1", "method": "notifications/tools/list_changed"});
    let stream = sse(&[other, request, answer(id)]);
    c.tool_result(id, resp(200, "text/event-stream", &[], &stream))
        .unwrap();
    assert_eq!(c.tools_version(), 3);
    // A listing carries the version it began at.
    let list = c.list_tools().unwrap();
    let page = json!({"result": {"tools": [tool("get", Some(true)), tool("gained", None)]},
        "jsonrpc": "2.0", "id": body(&list)["id"]});
    let Step::Ready(relisted) = c
        .on_response(resp(200, "application/json", &[], &page.to_string()))
        .unwrap()
    else {
        panic!("not ready")
    };
    assert_eq!(relisted.tools_version, 3);
    assert_eq!(relisted.module.operations.len(), 2);
    // A new session counts as a change: what it offers may differ.
    let id = c.call_tool("get", &json!({})).unwrap().id;
    assert_eq!(
        c.tool_result(id, resp(404, "", &[], "")),
        Err(McpError::SessionExpired)
    );
    let init = c.start();
    let renewed = renew(&mut c, init, vec![tool("get", Some(true))]);
    assert_eq!((renewed.tools_version, c.tools_version()), (4, 4));
}

#[test]
fn a_404_to_a_request_of_an_earlier_session_leaves_the_current_one() {
    let mut c = conn();
    ready(&mut c, vec![tool("get", Some(true))]);
    // Two calls in flight when the server forgets the session.
    let first = c.call_tool("get", &json!({})).unwrap().id;
    let second = c.call_tool("get", &json!({})).unwrap().id;
    assert_eq!(
        c.tool_result(first, resp(404, "", &[], "")),
        Err(McpError::SessionExpired)
    );
    assert!(!c.is_ready());
    let init = c.start();
    renew(&mut c, init, vec![tool("get", Some(true))]);
    assert!(c.is_ready());
    // The second call's 404 is the old session's: the new one stays.
    assert_eq!(
        c.tool_result(second, resp(404, "", &[], "")),
        Err(McpError::SessionExpired)
    );
    assert!(c.is_ready() && c.has_session());
    let retry = c.call_tool("get", &json!({})).unwrap();
    assert_eq!(
        header(&retry.request, "Mcp-Session-Id"),
        Some("second-session")
    );
}
