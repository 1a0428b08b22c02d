//! Datasets: create, list, show, config and publish token; and connecting.

use super::*;
use crate::catalog::CatalogExt;

#[tokio::test]
async fn datasets_are_created_listed_and_shown() {
    let catalog = catalog().await;
    assert!(catalog.describe().starts_with("postgres://"));
    assert!(!catalog.describe().contains('@'));
    assert_eq!(
        catalog.capabilities(),
        Capabilities::full_backend()
            .with(crate::catalog::PENDING_INDEX)
            .with(crate::catalog::write_audit::WRITE_AUDIT)
    );

    let dataset_id = unique_id("dataset");
    let config = DatasetConfig {
        staged_grace_period_ms: 7,
        ..DatasetConfig::default()
    };
    let created = catalog
        .create_dataset(&dataset_id, "uid-1", &config, 1_000, None)
        .await
        .unwrap();
    assert_eq!(
        created,
        Dataset {
            dataset_id: dataset_id.clone(),
            uid: "uid-1".to_string(),
            config: config.clone(),
            config_version: 1,
            checkpoint: Checkpoint::new(),
            manifest_version: 1,
            publish_token: None,
            fencing_epoch: 0,
            created_at_ms: 1_000,
            updated_at_ms: 1_000,
        }
    );
    assert_eq!(catalog.dataset(&dataset_id).await.unwrap(), created);

    let taken = catalog
        .create_dataset(&dataset_id, "uid-2", &config, 2_000, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&taken, MendError::AlreadyExists { kind: EntityKind::Dataset, id } if *id == dataset_id),
        "{taken:?}"
    );
    assert_eq!(catalog.dataset(&dataset_id).await.unwrap().uid, "uid-1");

    let second_id = format!("{dataset_id}-b");
    catalog
        .create_dataset(&second_id, "uid-3", &config, 1_000, None)
        .await
        .unwrap();
    let listed: Vec<String> = catalog
        .list_datasets()
        .await
        .unwrap()
        .into_iter()
        .map(|dataset| dataset.dataset_id)
        .collect();
    assert!(listed.is_sorted(), "{listed:?}");
    let position = listed.iter().position(|id| *id == dataset_id).unwrap();
    assert_eq!(listed[position + 1], second_id);

    let missing = catalog.dataset("no-such-dataset").await.unwrap_err();
    assert!(
        matches!(
            missing,
            MendError::NotFound {
                kind: EntityKind::Dataset,
                ..
            }
        ),
        "{missing:?}"
    );
}

#[tokio::test]
async fn config_and_token_changes_bump_versions_and_no_ops_write_nothing() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let config = DatasetConfig::default();

    let stale = catalog
        .update_config(&dataset_id, 2, &config, 2_000, None)
        .await
        .unwrap_err();
    assert!(
        matches!(stale, MendError::FailedPrecondition { .. }),
        "{stale:?}"
    );

    let same = catalog
        .update_config(&dataset_id, 1, &config, 2_000, None)
        .await
        .unwrap();
    assert_eq!(
        (
            same.config_version,
            same.manifest_version,
            same.updated_at_ms
        ),
        (1, 1, 1_000)
    );

    let changed_config = DatasetConfig {
        staged_grace_period_ms: 5,
        ..config
    };
    let changed = catalog
        .update_config(&dataset_id, 1, &changed_config, 2_000, None)
        .await
        .unwrap();
    assert_eq!(changed.config, changed_config);
    assert_eq!(
        (
            changed.config_version,
            changed.manifest_version,
            changed.updated_at_ms
        ),
        (2, 2, 2_000)
    );
    assert_eq!(catalog.dataset(&dataset_id).await.unwrap(), changed);

    let fenced = catalog
        .set_publish_token(&dataset_id, Some("epoch-1"), 3_000, None)
        .await
        .unwrap();
    assert_eq!(fenced.publish_token.as_deref(), Some("epoch-1"));
    assert_eq!(fenced.manifest_version, 3);
    let again = catalog
        .set_publish_token(&dataset_id, Some("epoch-1"), 4_000, None)
        .await
        .unwrap();
    assert_eq!(again, fenced);
    let cleared = catalog
        .set_publish_token(&dataset_id, None, 5_000, None)
        .await
        .unwrap();
    assert_eq!((cleared.publish_token, cleared.manifest_version), (None, 4));

    for error in [
        catalog
            .update_config("no-such-dataset", 1, &changed_config, 1, None)
            .await
            .unwrap_err(),
        catalog
            .set_publish_token("no-such-dataset", Some("t"), 1, None)
            .await
            .unwrap_err(),
    ] {
        assert!(
            matches!(
                error,
                MendError::NotFound {
                    kind: EntityKind::Dataset,
                    ..
                }
            ),
            "{error:?}"
        );
    }
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_and_its_password_stays_secret() {
    // A port that was free a moment ago refuses connections.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://mend:s3cret-password@127.0.0.1:{port}/catalog");
    let error = PostgresCatalog::connect(&url).await.unwrap_err();
    assert!(matches!(error, MendError::Unavailable { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains(&format!("127.0.0.1:{port}/catalog")),
        "{message}"
    );
    assert!(!format!("{error:?}").contains("s3cret"), "{error:?}");
}

/// The throwaway test cluster runs with fsync, synchronous_commit and full_page_writes off:
/// it acknowledges commits a crash can lose. Opened without accepting that, it is refused
/// before anything is written (migrations included), with a message naming each setting;
/// with the risk accepted it opens.
#[tokio::test]
async fn a_server_that_may_lose_acknowledged_commits_is_refused_unless_accepted() {
    let url = std::env::var("MEND_TEST_DATABASE_URL")
        .expect("run the Postgres tests under scripts/with-postgres");
    assert!(
        test_options().accept_unsafe_durability,
        "scripts/with-postgres starts a non-durable cluster and says so"
    );
    // A database of its own, so that "nothing was written" can be seen: no mend table in it.
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    let database = format!("durability_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE {database}"))
        .execute(&admin)
        .await
        .unwrap();
    let own_url = match url.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{database}"),
        None => panic!("{url} names no database"),
    };

    let error = PostgresCatalog::connect(&own_url).await.unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, MendError::FailedPrecondition { .. }),
        "{error:?}"
    );
    for named in [
        "fsync=off",
        "synchronous_commit=off",
        "full_page_writes=off",
        "postgres.accept_unsafe_durability",
    ] {
        assert!(message.contains(named), "{message}");
    }
    let own = sqlx::PgPool::connect(&own_url).await.unwrap();
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
    )
    .fetch_one(&own)
    .await
    .unwrap();
    assert_eq!(tables, 0, "a refused connect ran the migrations");

    let accepted = PostgresCatalog::connect_with(
        &own_url,
        super::super::PostgresOptions {
            accept_unsafe_durability: true,
        },
    )
    .await
    .unwrap();
    assert!(accepted.list_datasets().await.unwrap().is_empty());
    own.close().await;
    accepted.pool.close().await;
    sqlx::query(&format!("DROP DATABASE {database} WITH (FORCE)"))
        .execute(&admin)
        .await
        .unwrap();
}
