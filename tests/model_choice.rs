//! The stored layers of the model-preference resolver over real SQLite:
//! the Agent's and each Session's explicit model, checked against the
//! host's offer when set, surviving a restart, gone with their Session,
//! and resolved with the host's layers in the seed's order.

use shiitake::agent;
use shiitake::ctx::{CounterIds, Ctx};
use shiitake::error::ApiError;
use shiitake::meta::MetaPolicy;
use shiitake::model::preference::{resolve, Choice, Layer, Layers, Policy};
use shiitake::model::{ModelSpec, Provider, Reasoning, Refusal};
use shiitake::model_choice::{self, SetError};
use shiitake::sql::native::NativeSql;
use shiitake::sql::Sql;
use shiitake::store::{schema, Store};

fn policy() -> Policy {
    Policy {
        offered: ["openai/gpt-a", "anthropic/claude-b"]
            .map(|s| ModelSpec::parse(s).unwrap())
            .to_vec(),
        signed_in: vec![Provider::OpenAi, Provider::Anthropic],
        key_sources: None,
    }
}

fn choice(model: &str, reasoning: Option<Reasoning>) -> Choice {
    Choice {
        model: model.into(),
        reasoning,
    }
}

struct Db {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    sql: NativeSql,
    ids: CounterIds,
    meta: MetaPolicy,
}

impl Db {
    fn new() -> Db {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sqlite");
        let sql = NativeSql::open(&path).unwrap();
        schema::open(&sql).unwrap();
        Db {
            _dir: dir,
            path,
            sql,
            ids: CounterIds::default(),
            meta: MetaPolicy::default(),
        }
    }

    fn ctx(&mut self) -> Ctx<'_> {
        Ctx {
            store: Store::new(&self.sql),
            now_ms: 1_000,
            ids: &mut self.ids,
            meta: &self.meta,
            spans: Vec::new(),
            charged: None,
        }
    }

    fn restart(&mut self) {
        self.sql = NativeSql::open(&self.path).unwrap();
        schema::open(&self.sql).unwrap();
    }

    /// The resolver's stored layers for `session`, with the host's.
    fn resolve(
        &self,
        session: &str,
        host: &Layers,
    ) -> Result<(Layer, String, Option<Reasoning>), Refusal> {
        let (session, agent) = model_choice::layers(&self.sql, session).unwrap();
        let layers = Layers {
            session,
            agent,
            ..host.clone()
        };
        resolve(&layers, &policy()).map(|r| {
            (
                r.layer,
                shiitake::model::preference::address(&r.spec),
                r.reasoning,
            )
        })
    }
}

#[test]
fn nothing_stored_reads_without_the_table() {
    let db = Db::new();
    assert_eq!(model_choice::layers(&db.sql, "s").unwrap(), (None, None));
    assert_eq!(model_choice::agent(&db.sql).unwrap(), None);
    // Login: the first offered.
    assert_eq!(
        db.resolve("s", &Layers::default()).unwrap(),
        (Layer::Login, "openai/gpt-a".into(), None)
    );
}

#[test]
fn the_first_choice_makes_its_table_and_a_clearing_or_refused_one_none() {
    let mut db = Db::new();
    let made = |db: &Db| {
        let tables = db
            .sql
            .query(
                "SELECT count(*) FROM sqlite_master WHERE name = 'shiitake_model_choice'",
                &[],
            )
            .unwrap()[0]
            .int(0)
            .unwrap();
        (schema::MODEL_CHOICE.exists(&db.sql), tables)
    };
    // Clearing what was never set, and a model the host does not offer.
    model_choice::set_agent(&mut db.ctx(), &policy(), None).unwrap();
    let refused = model_choice::set_agent(
        &mut db.ctx(),
        &policy(),
        Some(&choice("openai/not-offered", None)),
    );
    assert!(matches!(refused, Err(SetError::Rejected(_))), "{refused:?}");
    assert_eq!(made(&db), (false, 0));
    let set = choice("openai/gpt-a", None);
    model_choice::set_agent(&mut db.ctx(), &policy(), Some(&set)).unwrap();
    assert_eq!(made(&db), (true, 1));
    db.restart();
    assert!(schema::MODEL_CHOICE.exists(&db.sql));
    assert_eq!(model_choice::agent(&db.sql).unwrap(), Some(set));
}

#[test]
fn agent_and_session_layers_are_stored_and_take_precedence() {
    let mut db = Db::new();
    let p = policy();
    let s1 = agent::create_session(&mut db.ctx(), Some("s1")).unwrap();
    let _ = s1;
    agent::create_session(&mut db.ctx(), Some("s2")).unwrap();
    let host = Layers {
        last_switch: Some("openai/gpt-a".into()),
        team_default: Some("openai/gpt-a".into()),
        ..Layers::default()
    };
    assert_eq!(db.resolve("s1", &host).unwrap().0, Layer::LastSwitch);

    // The Agent's model applies to every Session, with its reasoning.
    let set = model_choice::set_agent(
        &mut db.ctx(),
        &p,
        Some(&choice("anthropic/claude-b", Some(Reasoning::High))),
    )
    .unwrap();
    assert_eq!(
        set,
        Some(choice("anthropic/claude-b", Some(Reasoning::High)))
    );
    for s in ["s1", "s2"] {
        assert_eq!(
            db.resolve(s, &host).unwrap(),
            (
                Layer::Agent,
                "anthropic/claude-b".into(),
                Some(Reasoning::High)
            )
        );
    }
    // A Session's own model wins there only.
    model_choice::set_session(&mut db.ctx(), &p, "s1", Some(&choice("openai/gpt-a", None)))
        .unwrap();
    assert_eq!(
        db.resolve("s1", &host).unwrap(),
        (Layer::Session, "openai/gpt-a".into(), None)
    );
    assert_eq!(db.resolve("s2", &host).unwrap().0, Layer::Agent);

    // Both survive a restart.
    db.restart();
    assert_eq!(db.resolve("s1", &host).unwrap().0, Layer::Session);
    assert_eq!(
        model_choice::agent(&db.sql).unwrap(),
        Some(choice("anthropic/claude-b", Some(Reasoning::High)))
    );

    // Replacing keeps one row; clearing falls back to the layer below.
    model_choice::set_agent(
        &mut db.ctx(),
        &p,
        Some(&choice("openai/gpt-a", Some(Reasoning::Minimal))),
    )
    .unwrap();
    assert_eq!(
        db.resolve("s2", &host).unwrap(),
        (
            Layer::Agent,
            "openai/gpt-a".into(),
            Some(Reasoning::Minimal)
        )
    );
    model_choice::set_agent(&mut db.ctx(), &p, None).unwrap();
    assert_eq!(db.resolve("s2", &host).unwrap().0, Layer::LastSwitch);
    model_choice::set_session(&mut db.ctx(), &p, "s1", None).unwrap();
    assert_eq!(db.resolve("s1", &host).unwrap().0, Layer::LastSwitch);
}

#[test]
fn a_choice_the_host_does_not_admit_is_refused_and_stores_nothing() {
    let mut db = Db::new();
    let mut p = policy();
    agent::create_session(&mut db.ctx(), Some("s1")).unwrap();
    for (model, why) in [
        ("openai/not-offered", "not offered"),
        ("mistral/x", "unknown provider"),
        ("no-slash", "expected provider/model"),
    ] {
        match model_choice::set_agent(&mut db.ctx(), &p, Some(&choice(model, None))) {
            Err(SetError::Rejected(e)) => assert!(e.contains(why), "{model}: {e}"),
            other => panic!("{model}: {other:?}"),
        }
    }
    // The owner's key sources exclude anthropic: refused, never stored.
    p.key_sources = Some(vec![Provider::OpenAi]);
    match model_choice::set_session(
        &mut db.ctx(),
        &p,
        "s1",
        Some(&choice("anthropic/claude-b", None)),
    ) {
        Err(SetError::Rejected(e)) => assert!(e.contains("key sources exclude"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(model_choice::layers(&db.sql, "s1").unwrap(), (None, None));
    // An absent Session is refused as such.
    match model_choice::set_session(
        &mut db.ctx(),
        &p,
        "nope",
        Some(&choice("openai/gpt-a", None)),
    ) {
        Err(SetError::Api(ApiError::SessionNotFound(s))) => assert_eq!(s, "nope"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_stored_choice_the_host_stopped_admitting_is_skipped_at_resolution() {
    let mut db = Db::new();
    let p = policy();
    model_choice::set_agent(&mut db.ctx(), &p, Some(&choice("anthropic/claude-b", None))).unwrap();
    // The owner now restricts key sources to openai: the stored Agent
    // model is skipped, the Team default (openai) runs instead.
    let (session, agent) = model_choice::layers(&db.sql, "s").unwrap();
    let layers = Layers {
        session,
        agent,
        last_switch: None,
        team_default: Some("openai/gpt-a".into()),
    };
    let restricted = Policy {
        key_sources: Some(vec![Provider::OpenAi]),
        ..policy()
    };
    let r = resolve(&layers, &restricted).unwrap();
    assert_eq!(r.layer, Layer::TeamDefault);
    // Nothing admitted at all: a clear failure naming the skipped layer.
    let none = Policy {
        key_sources: Some(vec![]),
        ..policy()
    };
    let e = resolve(&layers, &none).unwrap_err().to_string();
    assert!(e.starts_with("model:unavailable:"), "{e}");
    assert!(e.contains("the Agent's model skipped"), "{e}");
}

#[test]
fn deleting_a_session_forgets_its_model() {
    let mut db = Db::new();
    let p = policy();
    agent::create_session(&mut db.ctx(), Some("s1")).unwrap();
    model_choice::set_session(
        &mut db.ctx(),
        &p,
        "s1",
        Some(&choice("anthropic/claude-b", None)),
    )
    .unwrap();
    agent::delete_session(&mut db.ctx(), "s1").unwrap();
    assert_eq!(model_choice::layers(&db.sql, "s1").unwrap(), (None, None));
    // A new Session of the same id starts without it.
    agent::create_session(&mut db.ctx(), Some("s1")).unwrap();
    assert_eq!(
        db.resolve("s1", &Layers::default()).unwrap().0,
        Layer::Login
    );
    // Deleting a Session with no choice (the table absent or present) works.
    agent::create_session(&mut db.ctx(), Some("s2")).unwrap();
    agent::delete_session(&mut db.ctx(), "s2").unwrap();
}
