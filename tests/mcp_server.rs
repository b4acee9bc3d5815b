//! The Agent as an MCP server (`POST /mcp`, docs/mcp-server.md) against the
//! real core and SQLite: the transport's refusals, tools mapped onto their
//! routes and served by the HTTP core (its bounds, refusals, replays and
//! identity rules), and the routes' answers as tool results.
//! Without the `mcp-server` feature (the lean build) `/mcp` is no route.

mod common;

use common::Harness;

/// The core's routes know no `/mcp`: a build with the `mcp-server`
/// feature serves it before them, and the lean build answers their 404.
#[test]
fn without_the_feature_mcp_is_no_route() {
    let mut h = Harness::new();
    for method in ["POST", "GET"] {
        let r = h.request(
            method,
            "/mcp",
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            None,
        );
        assert_eq!(
            (r.status, r.json["error"]["code"].as_str()),
            (404, Some("not_found"))
        );
    }
}

#[cfg(feature = "mcp-server")]
mod served {
    use super::common::Harness;

    use serde_json::{json, Value};
    use shiitake::http::{handle, Hosted, HttpRequest};
    use shiitake::mcp_server::{self, Answer, Step};
    use shiitake::meta::MetaPolicy;
    use shiitake::rpc;

    /// Headers of one `/mcp` request beside its body.
    #[derive(Default)]
    struct Headers<'a> {
        origin: Option<&'a str>,
        version: Option<&'a str>,
        meta: Option<&'a str>,
        /// The request's `host[:port]` (default `localhost:8787`) and
        /// `SHIITAKE_MCP_ALLOWED_HOSTS` (default unset).
        authority: Option<&'a str>,
        allowed_hosts: Option<&'a str>,
    }

    /// Serves one `/mcp` request as the host does: the step, and a tool call's
    /// route through the HTTP core.
    fn serve(h: &mut Harness, method: &str, body: &str, headers: Headers<'_>) -> Answer {
        let http = HttpRequest {
            method: method.into(),
            path: "/mcp".into(),
            query: String::new(),
            meta: headers.meta.map(Into::into),
            body: body.as_bytes().to_vec(),
            waited: false,
        };
        let allowed = mcp_server::allowed_hosts(headers.allowed_hosts).unwrap();
        let step = mcp_server::handle(&mcp_server::Request {
            http: &http,
            origin: headers.origin,
            protocol_version: headers.version,
            authority: headers.authority.unwrap_or("localhost:8787"),
            allowed_hosts: &allowed,
        });
        match step {
            Step::Answer(answer) => answer,
            Step::Call(call) => {
                let response =
                    h.with_ctx(|ctx| handle(ctx, &Hosted::without_models(None), &call.route));
                call.answer(&response)
            }
        }
    }

    fn request(h: &mut Harness, method: &str, params: Value, meta: Option<&str>) -> Answer {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        serve(
            h,
            "POST",
            &body.to_string(),
            Headers {
                meta,
                ..Headers::default()
            },
        )
    }

    fn result(answer: &Answer) -> Value {
        match answer {
            Answer::Json(text) => {
                let v: Value = serde_json::from_str(text).unwrap();
                assert_eq!(v["id"], 1, "{v}");
                v["result"].clone()
            }
            other => panic!("expected a JSON-RPC result, got {other:?}"),
        }
    }

    /// A JSON-RPC error: its HTTP status, code and message.
    fn error(answer: &Answer) -> (u16, i64, String) {
        match answer {
            Answer::Failed { status, body } => {
                let v: Value = serde_json::from_str(body).unwrap();
                (
                    *status,
                    v["error"]["code"].as_i64().unwrap(),
                    v["error"]["message"].as_str().unwrap().to_owned(),
                )
            }
            other => panic!("expected a JSON-RPC error, got {other:?}"),
        }
    }

    fn tool(h: &mut Harness, name: &str, args: Value, meta: Option<&str>) -> Value {
        result(&request(
            h,
            "tools/call",
            json!({ "name": name, "arguments": args }),
            meta,
        ))
    }

    /// A successful tool result's `structuredContent`, checked against its text.
    fn ok(result: Value) -> Value {
        assert!(result.get("isError").is_none(), "{result}");
        let text = result["content"][0]["text"].as_str().unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(text).unwrap(),
            result["structuredContent"]
        );
        result["structuredContent"].clone()
    }

    /// An error result's route status and code.
    fn refused(result: Value) -> (u64, String) {
        assert_eq!(result["isError"], true, "{result}");
        let e = &result["structuredContent"]["error"];
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(e["code"].as_str().unwrap()), "{text}");
        (
            e["status"].as_u64().unwrap(),
            e["code"].as_str().unwrap().to_owned(),
        )
    }

    #[test]
    fn initialize_negotiates_a_served_version() {
        let mut h = Harness::new();
        let r = result(&request(
            &mut h,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
            None,
        ));
        assert_eq!(r["protocolVersion"], "2025-06-18");
        assert_eq!(r["serverInfo"]["name"], "shiitake");
        assert!(r["capabilities"]["tools"].is_object());
        // A version not served is answered with the newest.
        let r = result(&request(
            &mut h,
            "initialize",
            json!({"protocolVersion": "2099-01-01"}),
            None,
        ));
        assert_eq!(r["protocolVersion"], shiitake::mcp::PROTOCOL_VERSIONS[0]);
        assert_eq!(result(&request(&mut h, "ping", json!({}), None)), json!({}));
        let names: Vec<Value> = result(&request(&mut h, "tools/list", json!({}), None))["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].clone())
            .collect();
        assert_eq!(
            names,
            json!([
                "list_sessions",
                "create_session",
                "prompt",
                "read_session",
                "wait_for_settlement",
                "cancel"
            ])
            .as_array()
            .unwrap()
            .clone()
        );
    }

    #[test]
    fn the_transport_refuses_what_it_does_not_serve() {
        let mut h = Harness::new();
        let init = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        // A browser page of another origin: 403 before anything is read.
        let (status, code, message) = error(&serve(
            &mut h,
            "POST",
            init,
            Headers {
                origin: Some("http://evil.example"),
                ..Headers::default()
            },
        ));
        assert_eq!((status, code), (403, rpc::INVALID_REQUEST));
        assert!(message.contains("evil.example"), "{message}");
        // Its own origin is served.
        let own = serve(
            &mut h,
            "POST",
            init,
            Headers {
                origin: Some("http://localhost:8787"),
                version: Some("2025-11-25"),
                ..Headers::default()
            },
        );
        assert_eq!(result(&own), json!({}));
        // DNS rebinding: a name rebound to a loopback server, Host and Origin
        // both naming it, is refused unless SHIITAKE_MCP_ALLOWED_HOSTS lists
        // it (loopback names by default); a request without Origin (no
        // browser) is served whatever its Host.
        let at = |h: &mut Harness, host: &str, origin: bool, allowed: Option<&str>| {
            let url = format!("http://{host}");
            let answer = serve(
                h,
                "POST",
                init,
                Headers {
                    origin: origin.then_some(url.as_str()),
                    authority: Some(host),
                    allowed_hosts: allowed,
                    ..Headers::default()
                },
            );
            match answer {
                Answer::Failed { status, .. } => status,
                _ => 200,
            }
        };
        assert_eq!(at(&mut h, "evil.example.com:8787", true, None), 403);
        let (status, _, message) = error(&serve(
            &mut h,
            "POST",
            init,
            Headers {
                origin: Some("http://evil.example.com:8787"),
                authority: Some("evil.example.com:8787"),
                ..Headers::default()
            },
        ));
        assert_eq!(status, 403);
        assert!(
            message.contains("`evil.example.com`")
                && message.contains("SHIITAKE_MCP_ALLOWED_HOSTS"),
            "{message}"
        );
        for host in [
            "localhost:8787",
            "127.0.0.1:8787",
            "[::1]:8787",
            "LOCALHOST",
        ] {
            assert_eq!(at(&mut h, host, true, None), 200, "{host}");
        }
        let listed = Some("agents.example.com, [::1]");
        assert_eq!(at(&mut h, "Agents.Example.com", true, listed), 200);
        assert_eq!(at(&mut h, "[::1]:8787", true, listed), 200);
        assert_eq!(at(&mut h, "localhost:8787", true, listed), 403);
        assert_eq!(
            at(&mut h, "evil.example.com", false, None),
            200,
            "no browser"
        );
        let (status, _, message) = error(&serve(
            &mut h,
            "POST",
            init,
            Headers {
                version: Some("2024-01-01"),
                ..Headers::default()
            },
        ));
        assert_eq!(status, 400);
        assert!(message.contains("2024-01-01"), "{message}");
        for method in ["GET", "DELETE"] {
            match serve(&mut h, method, "", Headers::default()) {
                Answer::Refused(e) => assert_eq!(e.status(), 405),
                other => panic!("{other:?}"),
            }
        }
        // A notification is accepted with no answer.
        let n = serve(
            &mut h,
            "POST",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            Headers::default(),
        );
        assert!(matches!(n, Answer::Accepted), "{n:?}");
        // Input the transport cannot accept: a 4xx.
        for (body, expected) in [
            ("{", rpc::PARSE_ERROR),
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                rpc::INVALID_REQUEST,
            ),
        ] {
            let (status, code, _) = error(&serve(&mut h, "POST", body, Headers::default()));
            assert_eq!((status, code), (400, expected), "{body}");
        }
        // A request it accepted and cannot serve: a JSON-RPC error in a 200.
        for (body, expected) in [
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"resources/list"}"#,
                rpc::METHOD_NOT_FOUND,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
                rpc::INVALID_PARAMS,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope"}}"#,
                rpc::INVALID_PARAMS,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"prompt","arguments":[]}}"#,
                rpc::INVALID_PARAMS,
            ),
        ] {
            match serve(&mut h, "POST", body, Headers::default()) {
                Answer::Json(text) => {
                    let v: Value = serde_json::from_str(&text).unwrap();
                    assert_eq!(
                        (v["id"].clone(), v["error"]["code"].as_i64()),
                        (json!(1), Some(expected)),
                        "{body}"
                    );
                }
                other => panic!("{body}: {other:?}"),
            }
        }
        let too_large = vec![b' '; shiitake::limits::BODY_BYTES_MAX + 1];
        match serve(
            &mut h,
            "POST",
            std::str::from_utf8(&too_large).unwrap(),
            Headers::default(),
        ) {
            Answer::Refused(e) => assert_eq!((e.status(), e.code()), (413, "payload_too_large")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tools_run_through_the_routes() {
        let mut h = Harness::new();
        let created = ok(tool(
            &mut h,
            "create_session",
            json!({"sessionId": "s1"}),
            None,
        ));
        assert_eq!(created, json!({"sessionId": "s1"}));
        let generated = ok(tool(&mut h, "create_session", json!({}), None));
        assert!(generated["sessionId"].as_str().unwrap().starts_with("ses_"));
        // The route's own refusal, as the tool's error result.
        assert_eq!(
            refused(tool(
                &mut h,
                "create_session",
                json!({"sessionId": "s1"}),
                None
            )),
            (409, "session_exists".into())
        );
        let listed = ok(tool(&mut h, "list_sessions", json!({"limit": 1}), None));
        assert_eq!(listed["sessions"].as_array().unwrap().len(), 1);
        let cursor = listed["cursor"].as_str().unwrap();
        let next = ok(tool(
            &mut h,
            "list_sessions",
            json!({"limit": 1, "cursor": cursor}),
            None,
        ));
        assert_eq!(next["sessions"].as_array().unwrap().len(), 1);
        assert_ne!(next["sessions"][0], listed["sessions"][0]);
        // The route's bound: its refusal, not one of MCP's own.
        assert_eq!(
            refused(tool(&mut h, "list_sessions", json!({"limit": 201}), None)),
            (400, "invalid_query".into())
        );

        // A prompt retried with the same requestId is admitted once.
        h.occupy("s1");
        let receipt = ok(tool(
            &mut h,
            "prompt",
            json!({"sessionId": "s1", "requestId": "r1", "text": "hi"}),
            None,
        ));
        let again = ok(tool(
            &mut h,
            "prompt",
            json!({"sessionId": "s1", "requestId": "r1", "text": "hi"}),
            None,
        ));
        assert_eq!(receipt, again);
        assert_eq!(h.pending("s1").len(), 1);
        assert_eq!(
            refused(tool(
                &mut h,
                "prompt",
                json!({"sessionId": "s1", "requestId": "r1", "text": "other"}),
                None
            )),
            (409, "request_conflict".into())
        );
        let command_id = receipt["commandId"].as_str().unwrap();

        let page = ok(tool(
            &mut h,
            "read_session",
            json!({"sessionId": "s1", "limit": 5}),
            None,
        ));
        assert_eq!(page["pending"][0]["commandId"], command_id);
        let waited = ok(tool(
            &mut h,
            "wait_for_settlement",
            json!({"sessionId": "s1", "commandId": command_id}),
            None,
        ));
        assert_eq!(waited, json!({"settlement": null}));
        let cancelled = ok(tool(
            &mut h,
            "cancel",
            json!({"sessionId": "s1", "commandId": command_id}),
            None,
        ));
        assert_eq!(cancelled["status"], "cancelled");
        assert_eq!(cancelled["text"], "hi");
        let settled = ok(tool(
            &mut h,
            "wait_for_settlement",
            json!({"sessionId": "s1", "commandId": command_id, "timeoutMs": 1000}),
            None,
        ));
        assert_eq!(settled["settlement"]["terminal"], "cancelled");
        assert_eq!(
            refused(tool(
                &mut h,
                "read_session",
                json!({"sessionId": "nope"}),
                None
            )),
            (404, "session_not_found".into())
        );
    }

    #[test]
    fn arguments_are_checked_against_the_tool_schema() {
        let mut h = Harness::new();
        for (args, named) in [
            (
                json!({"sessionId": "s1", "text": "hi"}),
                "arguments.requestId",
            ),
            (
                json!({"sessionId": "s1", "requestId": 7, "text": "hi"}),
                "arguments.requestId",
            ),
            (
                json!({"sessionId": "s1", "requestId": "r", "text": "hi", "x": 1}),
                "arguments.x",
            ),
            // A path segment is checked before it is one.
            (
                json!({"sessionId": "a/b", "requestId": "r", "text": "hi"}),
                "sessionId",
            ),
        ] {
            let r = tool(&mut h, "prompt", args.clone(), None);
            assert_eq!(
                refused(r.clone()),
                (400, "invalid_request".into()),
                "{args}"
            );
            let message = r["structuredContent"]["error"]["message"].as_str().unwrap();
            assert!(message.contains(named), "{message}");
        }
        let r = tool(
            &mut h,
            "read_session",
            json!({"sessionId": "s", "limit": -1}),
            None,
        );
        assert_eq!(refused(r), (400, "invalid_request".into()));
    }

    #[test]
    fn host_metadata_and_identity_apply_to_tool_calls() {
        const SCHEMA: &str = r#"{"type":"object","properties":{"author":{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}},"required":["author"]}"#;
        let mut h = Harness::with_meta(MetaPolicy::new(Some(SCHEMA), Some("$.author.id")).unwrap());
        let alice = Some(r#"{"author":{"id":"alice"}}"#);
        let bob = Some(r#"{"author":{"id":"bob"}}"#);
        ok(tool(
            &mut h,
            "create_session",
            json!({"sessionId": "s"}),
            alice,
        ));
        h.occupy("s");
        let receipt = ok(tool(
            &mut h,
            "prompt",
            json!({"sessionId": "s", "requestId": "r", "text": "hi"}),
            alice,
        ));
        // Invalid metadata is the route's 400.
        assert_eq!(
            refused(tool(
                &mut h,
                "prompt",
                json!({"sessionId": "s", "requestId": "q", "text": "hi"}),
                Some("{}")
            )),
            (400, "invalid_meta".into())
        );
        // Another principal may not cancel alice's prompt.
        let command_id = receipt["commandId"].as_str().unwrap();
        assert_eq!(
            refused(tool(
                &mut h,
                "cancel",
                json!({"sessionId": "s", "commandId": command_id}),
                bob
            )),
            (403, "not_owner".into())
        );
        let page = ok(tool(
            &mut h,
            "read_session",
            json!({"sessionId": "s"}),
            alice,
        ));
        assert_eq!(
            page["pending"][0]["meta"]["author"]["id"], "alice",
            "{page}"
        );
        let cancelled = ok(tool(
            &mut h,
            "cancel",
            json!({"sessionId": "s", "commandId": command_id}),
            alice,
        ));
        assert_eq!(cancelled["status"], "cancelled");
    }
}
