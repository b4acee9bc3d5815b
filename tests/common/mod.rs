//! A native harness: the real HTTP core over real SQLite, with a fixed clock
//! and counter ids, and "restart" as closing and reopening the database file.
#![allow(dead_code)] // each test binary uses a different part of the harness

use serde_json::Value;
use shiitake::ctx::{CounterIds, Ctx};
use shiitake::http::{handle, Hosted, HttpRequest};
use shiitake::meta::MetaPolicy;
use shiitake::sql::native::NativeSql;
use shiitake::store::{schema, Store};
use std::path::PathBuf;

pub mod sim;

pub struct Harness {
    _dir: tempfile::TempDir,
    path: PathBuf,
    sql: NativeSql,
    ids: CounterIds,
    pub now_ms: i64,
    /// Set by `restart`: turns claimed at admission are no longer fresh.
    pub restarted: bool,
    pub meta: MetaPolicy,
    /// The Agent's extensions, told of every settlement.
    pub extensions: Option<shiitake::extension::Extensions>,
}

pub struct Reply {
    pub status: u16,
    pub json: Value,
}

impl Harness {
    /// A harness whose host binds identities and checks metadata.
    pub fn with_meta(meta: MetaPolicy) -> Self {
        Harness {
            meta,
            ..Harness::new()
        }
    }

    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sqlite");
        let sql = NativeSql::open(&path).unwrap();
        schema::open(&sql).unwrap();
        Harness {
            _dir: dir,
            path,
            sql,
            ids: CounterIds::default(),
            now_ms: 1_000,
            restarted: false,
            meta: MetaPolicy::default(),
            extensions: None,
        }
    }

    /// Drops every in-memory handle and reopens the store, as an evicted or
    /// restarted Durable Object does. Ids keep counting so they stay unique.
    pub fn restart(&mut self) {
        self.restarted = true;
        self.sql = NativeSql::open(&self.path).unwrap();
        schema::open(&self.sql).unwrap();
    }

    pub fn sql(&self) -> &NativeSql {
        &self.sql
    }

    /// Runs `f` with the extensions and a core context at the harness clock.
    pub fn with_ext<T>(
        &mut self,
        f: impl FnOnce(&shiitake::extension::Extensions, &mut Ctx<'_>) -> T,
    ) -> T {
        self.now_ms += 1;
        let e = self.extensions.as_ref().expect("extensions");
        let mut ctx = Ctx {
            store: Store::observed(&self.sql, e),
            now_ms: self.now_ms,
            ids: &mut self.ids,
            meta: &self.meta,
            spans: Vec::new(),
            charged: None,
        };
        f(e, &mut ctx)
    }

    /// Runs `f` with a core context at the harness clock.
    pub fn with_ctx<T>(&mut self, f: impl FnOnce(&mut Ctx<'_>) -> T) -> T {
        self.now_ms += 1;
        let store = match &self.extensions {
            Some(e) => Store::observed(&self.sql, e),
            None => Store::new(&self.sql),
        };
        let mut ctx = Ctx {
            store,
            now_ms: self.now_ms,
            ids: &mut self.ids,
            meta: &self.meta,
            spans: Vec::new(),
            charged: None,
        };
        f(&mut ctx)
    }

    pub fn request(&mut self, method: &str, target: &str, body: &str, meta: Option<&str>) -> Reply {
        self.now_ms += 1;
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let req = HttpRequest {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            meta: meta.map(Into::into),
            body: body.as_bytes().to_vec(),
            waited: false,
        };
        let store = match &self.extensions {
            Some(e) => Store::observed(&self.sql, e),
            None => Store::new(&self.sql),
        };
        let mut ctx = Ctx {
            store,
            now_ms: self.now_ms,
            ids: &mut self.ids,
            meta: &self.meta,
            spans: Vec::new(),
            charged: None,
        };
        let hosted = Hosted::without_models(self.extensions.as_ref());
        let r = handle(&mut ctx, &hosted, &req);
        let json = r
            .body
            .as_deref()
            .map_or(Value::Null, |b| serde_json::from_str(b).unwrap());
        Reply {
            status: r.status,
            json,
        }
    }

    pub fn call(&mut self, method: &str, target: &str, body: Value) -> Reply {
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        self.request(method, target, &body, None)
    }

    pub fn session(&mut self, id: &str) {
        let r = self.call("POST", "/sessions", serde_json::json!({ "sessionId": id }));
        assert_eq!(r.status, 201, "{}", r.json);
    }

    /// Starts a turn in the Session that nothing finishes (no run loop runs
    /// here), so later prompts queue behind it.
    pub fn occupy(&mut self, session: &str) {
        let r = self.prompt(session, "occupier", "occupies the session");
        assert_eq!(r.status, 200, "{}", r.json);
        assert!(self.read(session, "").json["running"].is_object());
    }

    pub fn command(&mut self, session: &str, body: Value) -> Reply {
        self.call("POST", &format!("/sessions/{session}/commands"), body)
    }

    pub fn prompt(&mut self, session: &str, request_id: &str, text: &str) -> Reply {
        self.command(
            session,
            serde_json::json!({ "type": "prompt", "requestId": request_id, "text": text }),
        )
    }

    pub fn withdraw(&mut self, session: &str, request_id: &str) -> Reply {
        self.call(
            "POST",
            &format!("/sessions/{session}/withdraw"),
            serde_json::json!({ "requestId": request_id }),
        )
    }

    pub fn read(&mut self, session: &str, query: &str) -> Reply {
        self.call("GET", &format!("/sessions/{session}{query}"), Value::Null)
    }

    /// `(commandId, requestId, text)` of the pending queue, FIFO.
    pub fn pending(&mut self, session: &str) -> Vec<(String, String, String)> {
        let r = self.read(session, "");
        assert_eq!(r.status, 200, "{}", r.json);
        r.json["pending"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, p)| {
                assert_eq!(p["position"], i + 1);
                (
                    p["commandId"].as_str().unwrap().to_owned(),
                    p["requestId"].as_str().unwrap().to_owned(),
                    p["text"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }
}
