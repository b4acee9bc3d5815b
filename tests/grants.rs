//! Delivery of a Session's grants: versions never move back, the same
//! version with other grants replaces, the stored grants survive a restart
//! and go with the Session.

mod common;

use common::Harness;
use serde_json::json;
use shiitake::grants::{deliver, delivered, Delivered, Level};

fn send(h: &mut Harness, session: &str, body: serde_json::Value) -> Result<Delivered, String> {
    h.with_ctx(|ctx| deliver(ctx, session, &body.to_string()))
        .map_err(|e| format!("{} {}", e.code(), e))
}

#[test]
fn versions_never_move_back_and_the_same_version_replaces() {
    let mut h = Harness::new();
    h.session("s");
    let v2 = json!({"version": 2, "grants": {"mcp.notes": "read"}});
    assert_eq!(send(&mut h, "s", v2.clone()), Ok(Delivered::Stored));
    assert_eq!(send(&mut h, "s", v2), Ok(Delivered::Unchanged));
    let older = send(
        &mut h,
        "s",
        json!({"version": 1, "grants": {"mcp.notes": "write"}}),
    );
    assert!(older.unwrap_err().starts_with("grant_version_refused"));
    let same = json!({"version": 2, "grants": {"mcp.notes": "none", "files": "write"}});
    assert_eq!(send(&mut h, "s", same), Ok(Delivered::Replaced));
    h.restart();
    let stored = h.with_ctx(|ctx| delivered(ctx, "s")).unwrap().unwrap();
    assert_eq!(stored.version, 2);
    assert_eq!(
        stored.grants.get("mcp.notes"),
        Some(&Level::None),
        "replaced, not merged"
    );
    assert_eq!(stored.grants.get("files"), Some(&Level::Write));
    assert_eq!(
        send(&mut h, "s", json!({"version": 3, "grants": {}})),
        Ok(Delivered::Stored)
    );
    // Session-scoped, and deleted with the Session.
    h.session("t");
    assert!(h.with_ctx(|ctx| delivered(ctx, "t")).unwrap().is_none());
    assert_eq!(h.call("DELETE", "/sessions/s", json!(null)).status, 204);
    assert!(h.with_ctx(|ctx| delivered(ctx, "s")).unwrap().is_none());
}

#[test]
fn deliveries_are_closed_schemas() {
    let mut h = Harness::new();
    h.session("s");
    for bad in [
        json!({"version": 1}),
        json!({"version": -1, "grants": {}}),
        json!({"version": 1, "grants": {"files": "admin"}}),
        json!({"version": 1, "grants": {}, "extra": true}),
        json!({"version": 1, "grants": {"": "read"}}),
    ] {
        let e = send(&mut h, "s", bad.clone()).unwrap_err();
        assert!(e.starts_with("invalid_request"), "{bad}: {e}");
    }
}
