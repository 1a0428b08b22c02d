//! What the server's unit tests share: a server's state on an in-memory catalog, and a way
//! to send it a request.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::Value;
use tokio::sync::watch;
use tower::ServiceExt;

use crate::metrics::Metrics;
use crate::supervisor::{SupervisorOptions, Supervisors};
use crate::writes::Writes;
use crate::{ServeLimits, ServeOptions, Shared};

/// A server's shared state on an in-memory catalog, with the built-in policy: `admin_token`
/// its admin token, no tokens file.
pub(crate) async fn shared_with_admin_token(admin_token: Option<&str>) -> Arc<Shared> {
    shared(crate::access::Credentials {
        tokens_file: None,
        admin_token: admin_token.map(str::to_owned),
    })
    .await
}

/// A server's shared state on an in-memory catalog, with the built-in policy, letting in
/// whom `credentials` name.
pub(crate) async fn shared(credentials: crate::access::Credentials) -> Arc<Shared> {
    shared_with_limits(credentials, ServeLimits::default()).await
}

/// [`shared`], held to `limits`.
pub(crate) async fn shared_with_limits(
    credentials: crate::access::Credentials,
    limits: ServeLimits,
) -> Arc<Shared> {
    let (catalog, objects) = mend::catalog::open("memory://", None).await.unwrap();
    let policy = mend::runtime::PolicyRuntime::default_policy().unwrap();
    let engine = mend::Engine::new(catalog, objects, policy, Default::default()).unwrap();
    let (store, prefix) = engine.objects().store();
    let registry = mend::runtime::registry::PolicyRegistry::new(store.clone(), prefix.clone());
    let options = ServeOptions {
        credentials: credentials.clone(),
        insecure: false,
        tls: None,
        probe_listen: None,
        supervisor: SupervisorOptions::default(),
        load: Default::default(),
        dataset_defaults: Default::default(),
        membership: None,
        limits,
    };
    let metrics = Arc::new(Metrics::default());
    let writes = Arc::new(Writes::new(
        options.limits.max_queued_writes,
        options.limits.max_queued_writes_per_dataset,
    ));
    let (_stop, stopped) = watch::channel(false);
    let supervisors = Supervisors::new(
        engine.clone(),
        options.supervisor,
        metrics.clone(),
        writes.clone(),
        Arc::new(mend::fleet::SoloMembership::new(
            "openapi-test".to_string(),
            mend::fleet::DEFAULT_MEMBER_LEASE,
        )),
        stopped,
    );
    Arc::new(Shared {
        engine,
        credentials,
        quotas: crate::quotas::Quotas::new(options.limits.principal),
        guessing: crate::guessing::Guessing::default(),
        registry,
        options,
        metrics,
        supervisors,
        writes,
        ready: AtomicBool::new(false),
        shutting_down: AtomicBool::new(false),
        discovery_error: std::sync::Mutex::new(None),
    })
}

/// Sends `request`; its status, `Allow` header and body (JSON, or null).
pub(crate) async fn send(router: &Router, request: Request<Body>) -> (StatusCode, String, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let allow = response
        .headers()
        .get(header::ALLOW)
        .map(|value| value.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, allow, body)
}
