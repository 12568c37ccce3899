//! `portcullis-ingress`: portcullis as a Kubernetes ingress controller. It watches the
//! cluster's IngressClasses, Ingresses, Services, EndpointSlices and Secrets, makes them into
//! nginx.conf (`translate`), and runs the portcullis server in the same process on that
//! configuration, swapping in a new one (hitless, as `portcullis -s reload`) whenever what it
//! watches changes. Each Ingress that cannot be applied gets a Kubernetes Event saying why;
//! the others keep working.
//!
//! ```text
//! portcullis-ingress [--kubeconfig FILE] [--http-port 80] [--https-port 443] [--health-port 8081]
//!                    [--class portcullis] [--controller portcullis.dev/ingress-controller]
//!                    [--gateway-controller portcullis.dev/gateway-controller]
//!                    [--dir /var/lib/portcullis-ingress] [--workers N]
//!                    [--status-address ADDR] [--configmap NAMESPACE/NAME]
//!                    [--enable-snippets] [--dump]
//! ```
//!
//! In a cluster it uses its service account; with `--kubeconfig` that file. `--dump` prints
//! the configuration it would run, as nginx.conf text (`portcullis -t` reads it), and exits.
//! With `--status-address`, each Ingress it applies gets `status.loadBalancer.ingress` with
//! that address (the load balancer's in front of the replicas). The ConfigMap's keys are defaults of
//! every Ingress's annotations of the same names; one it does not know refuses the ConfigMap
//! (an Event on it), and the defaults last accepted stay until it is fixed. Snippets of raw
//! configuration (`nginx.org/location-snippets` and the like) refuse their Ingress or the
//! ConfigMap unless the operator gives `--enable-snippets`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use portcullis_ingress::{gateway, translate, Cluster, Settings};
use tokio::sync::Notify;

/// What the command line says.
#[derive(Debug, Clone)]
struct Options {
    kubeconfig: Option<PathBuf>,
    http_port: u16,
    https_port: u16,
    /// Where `/ready` and `/live` answer (0: nowhere).
    health_port: u16,
    class: String,
    controller: String,
    /// `spec.controllerName` of the GatewayClasses that are this controller's.
    gateway_controller: String,
    dir: PathBuf,
    workers: usize,
    dump: bool,
    /// `--enable-snippets`: raw configuration in annotations and the ConfigMap is applied.
    snippets: bool,
    /// `--configmap NAMESPACE/NAME`: the controller's ConfigMap, defaults for every Ingress.
    configmap: Option<(String, String)>,
    /// What the Ingresses' `status.loadBalancer` says reaches them (an IP address or a
    /// host name, the same for every replica): `--status-address`; none, no status is
    /// written.
    status_address: Option<String>,
}

const USAGE: &str = "usage: portcullis-ingress [--kubeconfig FILE] [--http-port N] \
[--https-port N] [--health-port N] [--class NAME] [--controller NAME] \
[--gateway-controller NAME] [--dir DIR] [--workers N] \
[--status-address ADDR] [--configmap NAMESPACE/NAME] [--enable-snippets] [--dump]";

fn options(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut o = Options {
        kubeconfig: None,
        http_port: 80,
        https_port: 443,
        health_port: 8081,
        class: "portcullis".into(),
        controller: "portcullis.dev/ingress-controller".into(),
        gateway_controller: "portcullis.dev/gateway-controller".into(),
        dir: PathBuf::from("/var/lib/portcullis-ingress"),
        workers: std::thread::available_parallelism().map_or(1, usize::from),
        dump: false,
        snippets: false,
        status_address: None,
        configmap: None,
    };
    while let Some(flag) = args.next() {
        if flag == "--dump" {
            o.dump = true;
            continue;
        }
        if flag == "--enable-snippets" {
            o.snippets = true;
            continue;
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let number = |v: &str| v.parse().map_err(|_| format!("invalid {flag} \"{v}\""));
        match flag.as_str() {
            "--kubeconfig" => o.kubeconfig = Some(value.into()),
            "--http-port" => o.http_port = number(&value)?,
            "--https-port" => o.https_port = number(&value)?,
            "--health-port" => o.health_port = number(&value)?,
            "--class" => o.class = value,
            "--controller" => o.controller = value,
            "--gateway-controller" => o.gateway_controller = value,
            "--dir" => o.dir = value.into(),
            "--status-address" => o.status_address = Some(value),
            "--configmap" => {
                let (ns, name) = value
                    .split_once('/')
                    .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
                    .ok_or_else(|| format!("--configmap wants NAMESPACE/NAME, not \"{value}\""))?;
                o.configmap = Some((ns.to_owned(), name.to_owned()));
            }
            "--workers" => {
                o.workers = value
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("invalid --workers \"{value}\""))?
            }
            _ => return Err(format!("unknown option \"{flag}\"\n{USAGE}")),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    let opts = match options(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("portcullis-ingress: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build();
    let result = match runtime {
        Ok(rt) => rt.block_on(run(opts)),
        Err(e) => Err(format!("cannot start: {e}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("portcullis-ingress: [emerg] {e}");
            ExitCode::FAILURE
        }
    }
}

async fn client(opts: &Options) -> Result<Client, String> {
    let config = match &opts.kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| format!("no cluster to talk to: {e}"))?,
    };
    Client::try_from(config).map_err(|e| format!("cannot make a client: {e}"))
}

/// The objects watched, each kind a store the watchers keep current.
struct Watched {
    ingresses: Store<Ingress>,
    classes: Store<IngressClass>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    secrets: Store<Secret>,
    /// `nginx.org/jwk` Secrets, the key sets of `nginx.com/jwt-key`.
    key_sets: Store<Secret>,
    /// Namespaces: their labels, which Gateway listeners select routes' namespaces by.
    namespaces: Store<Namespace>,
    /// The controller's ConfigMap, when it has one.
    config: Option<Store<ConfigMap>>,
    /// GatewayClasses, Gateways and HTTPRoutes, once the cluster serves the Gateway API (at
    /// start, or when its CRDs are installed later).
    gateway_api: Arc<std::sync::OnceLock<GatewayStores>>,
    /// ReferenceGrants, once the cluster serves them.
    grants: Arc<std::sync::OnceLock<GatewayStores>>,
    /// Told of every change.
    changed: Arc<Notify>,
}

impl Watched {
    async fn start(client: &Client, configmap: Option<&(String, String)>) -> Watched {
        let changed = Arc::new(Notify::new());
        let config = configmap.map(|(ns, name)| {
            let selector = watcher::Config::default().fields(&format!("metadata.name={name}"));
            watch(Api::namespaced(client.clone(), ns), selector, &changed)
        });
        let gateway_api = Arc::new(std::sync::OnceLock::new());
        let grants = Arc::new(std::sync::OnceLock::new());
        for (slot, part) in [(&gateway_api, Part::Routes), (&grants, Part::Grants)] {
            match part.kinds(client).await {
                Some(kinds) => {
                    let _ = slot.set(gateway_stores(client, kinds, &changed));
                }
                None => {
                    eprintln!(
                        "portcullis-ingress: [notice] {} not served: watched once it is",
                        part.name()
                    );
                    // Its CRDs installed later: watched from then on.
                    let (client, changed, slot) = (client.clone(), changed.clone(), slot.clone());
                    tokio::spawn(async move {
                        loop {
                            tokio::time::sleep(GATEWAY_API_POLL).await;
                            if let Some(kinds) = part.kinds(&client).await {
                                eprintln!(
                                    "portcullis-ingress: [notice] {} served: watching it",
                                    part.name()
                                );
                                let _ = slot.set(gateway_stores(&client, kinds, &changed));
                                changed.notify_one();
                                return;
                            }
                        }
                    });
                }
            }
        }
        Watched {
            config,
            gateway_api,
            grants,
            ingresses: watch(
                Api::all(client.clone()),
                watcher::Config::default(),
                &changed,
            ),
            classes: watch(
                Api::all(client.clone()),
                watcher::Config::default(),
                &changed,
            ),
            services: watch(
                Api::all(client.clone()),
                watcher::Config::default(),
                &changed,
            ),
            slices: watch(
                Api::all(client.clone()),
                watcher::Config::default(),
                &changed,
            ),
            // Only certificates and key sets: a cluster's other secrets are none of ours.
            secrets: watch(
                Api::all(client.clone()),
                watcher::Config::default().fields("type=kubernetes.io/tls"),
                &changed,
            ),
            namespaces: watch(
                Api::all(client.clone()),
                watcher::Config::default(),
                &changed,
            ),
            key_sets: watch(
                Api::all(client.clone()),
                watcher::Config::default().fields("type=nginx.org/jwk"),
                &changed,
            ),
            changed,
        }
    }

    async fn ready(&self) -> Result<(), String> {
        let lost = |_| "a watch ended before its first list".to_string();
        self.ingresses.wait_until_ready().await.map_err(lost)?;
        self.classes.wait_until_ready().await.map_err(lost)?;
        self.services.wait_until_ready().await.map_err(lost)?;
        self.slices.wait_until_ready().await.map_err(lost)?;
        self.secrets.wait_until_ready().await.map_err(lost)?;
        if let Some(c) = &self.config {
            c.wait_until_ready().await.map_err(lost)?;
        }
        let parts = [self.gateway_api.get(), self.grants.get()];
        for (_, store) in parts.into_iter().flatten().flatten() {
            store.wait_until_ready().await.map_err(lost)?;
        }
        self.namespaces.wait_until_ready().await.map_err(lost)?;
        self.key_sets.wait_until_ready().await.map_err(lost)
    }

    fn cluster(&self) -> Cluster {
        fn all<K>(s: &Store<K>) -> Vec<K>
        where
            K: kube::runtime::reflector::Lookup + Clone,
            K::DynamicType: Eq + std::hash::Hash + Clone,
        {
            s.state().iter().map(|k| (**k).clone()).collect()
        }
        Cluster {
            ingresses: all(&self.ingresses),
            classes: all(&self.classes),
            services: all(&self.services),
            slices: all(&self.slices),
            secrets: [all(&self.secrets), all(&self.key_sets)].concat(),
            namespaces: all(&self.namespaces),
            gateway_classes: gateway_objects(self.gateway_api.get(), 0),
            gateways: gateway_objects(self.gateway_api.get(), 1),
            routes: gateway_objects(self.gateway_api.get(), 2),
            grants: gateway_objects(self.grants.get(), 0),
        }
    }
}

/// The objects of one Gateway API kind (`stores`' `kind`th), as the controller reads them.
fn gateway_objects<S: serde::de::DeserializeOwned + Default>(
    stores: Option<&GatewayStores>,
    kind: usize,
) -> Vec<gateway::Object<S>> {
    let Some((_, store)) = stores.and_then(|s| s.get(kind)) else {
        return Vec::new();
    };
    (store.state().iter())
        .filter_map(|o| {
            let value = serde_json::to_value(&**o).ok()?;
            serde_json::from_value(value)
                .map_err(|e| {
                    let name = o.metadata.name.as_deref().unwrap_or("");
                    eprintln!("portcullis-ingress: [warn] {name}: {e}");
                })
                .ok()
        })
        .collect()
}

/// The stores of Gateway API kinds: GatewayClass, Gateway and HTTPRoute, or ReferenceGrant.
type GatewayStores = Vec<(ApiResource, Store<DynamicObject>)>;

/// The parts of the Gateway API watched apart: the routes' kinds (`v1`), and the grants of
/// references between namespaces (`v1beta1`), which a cluster may serve later or not at all.
#[derive(Debug, Clone, Copy)]
enum Part {
    Routes,
    Grants,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::Routes => "the Gateway API",
            Part::Grants => "its ReferenceGrants",
        }
    }

    /// Its kinds, when the cluster serves them.
    async fn kinds(self, client: &Client) -> Option<Vec<ApiResource>> {
        match self {
            Part::Routes => gateway_kinds(client).await,
            Part::Grants => {
                let version = format!("{}/v1beta1", gateway::GROUP);
                let served = client.list_api_group_resources(&version).await.ok()?;
                let kind = served_kinds("v1beta1", served);
                Some(vec![kind("ReferenceGrant", "referencegrants")?])
            }
        }
    }
}

/// How often a cluster without the Gateway API is asked again whether it serves it.
const GATEWAY_API_POLL: Duration = Duration::from_secs(10);

/// Watches of the Gateway API's kinds, telling `changed` of every change.
fn gateway_stores(
    client: &Client,
    kinds: Vec<ApiResource>,
    changed: &Arc<Notify>,
) -> GatewayStores {
    (kinds.into_iter())
        .map(|resource| {
            let api = Api::all_with(client.clone(), &resource);
            let store = watch_with(api, watcher::Config::default(), resource.clone(), changed);
            (resource, store)
        })
        .collect()
}

/// GatewayClass, Gateway and HTTPRoute of `gateway.networking.k8s.io/v1`, when the cluster
/// serves them (their CRDs are installed).
async fn gateway_kinds(client: &Client) -> Option<Vec<ApiResource>> {
    let v1 = format!("{}/v1", gateway::GROUP);
    let kind = served_kinds("v1", client.list_api_group_resources(&v1).await.ok()?);
    Some(vec![
        kind("GatewayClass", "gatewayclasses")?,
        kind("Gateway", "gateways")?,
        kind("HTTPRoute", "httproutes")?,
    ])
}

/// A kind of the Gateway API's `version` by its plural, if `served` has it.
fn served_kinds(
    version: &'static str,
    served: k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList,
) -> impl Fn(&str, &str) -> Option<ApiResource> {
    move |kind, plural| {
        served.resources.iter().any(|r| r.name == plural).then(|| {
            ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(gateway::GROUP, version, kind),
                plural,
            )
        })
    }
}

/// A store of `api`'s objects, kept current by a task that watches them (and retries with
/// backoff when the API server goes away), telling `changed` of every change.
fn watch<K>(api: Api<K>, config: watcher::Config, changed: &Arc<Notify>) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K: serde::de::DeserializeOwned,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    watch_with(api, config, Default::default(), changed)
}

/// `watch` of a kind known only when running (`DynamicObject`).
fn watch_with<K>(
    api: Api<K>,
    config: watcher::Config,
    kind: K::DynamicType,
    changed: &Arc<Notify>,
) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K: serde::de::DeserializeOwned,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    use kube::runtime::WatchStreamExt;
    let writer = reflector::store::Writer::new(kind);
    let store = writer.as_reader();
    let changed = changed.clone();
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Err(e) = event {
                eprintln!("portcullis-ingress: [warn] watch: {e}");
            }
            changed.notify_one();
        }
    });
    store
}

async fn run(opts: Options) -> Result<(), String> {
    let client = client(&opts).await?;
    let watched = Watched::start(&client, opts.configmap.as_ref()).await;
    watched.ready().await?;
    std::fs::create_dir_all(opts.dir.join("secrets"))
        .and_then(|()| std::fs::create_dir_all(opts.dir.join("logs")))
        .map_err(|e| format!("{}: {e}", opts.dir.display()))?;
    let settings = Settings {
        controller: opts.controller.clone(),
        class: opts.class.clone(),
        http_port: opts.http_port,
        https_port: opts.https_port,
        files: opts.dir.join("secrets"),
        default_certificate: default_certificate(&opts.dir)?,
        defaults: Default::default(),
        gateway_controller: opts.gateway_controller.clone(),
        status_address: opts.status_address.clone(),
        snippets: opts.snippets,
        health_port: opts.health_port,
    };
    let mut settings = settings;
    if opts.dump {
        if let Some(c) = &watched.config {
            settings.defaults = config_defaults(c, opts.snippets).map_err(|(_, why)| why)?;
        }
        let generated = translate(&watched.cluster(), &settings);
        print!("{}", main_config(&opts, &generated.http));
        return Ok(());
    }
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "portcullis-ingress".into(),
            instance: std::env::var("POD_NAME").ok(),
        },
    );
    let mut server: Option<portcullis_server::Server> = None;
    let mut running = String::new();
    let mut running_files = std::collections::BTreeMap::new();
    let mut reported = BTreeSet::new();
    let mut loadable_instead: Option<(String, portcullis_ingress::Generated)> = None;
    loop {
        if let Some(c) = &watched.config {
            match config_defaults(c, opts.snippets) {
                Ok(defaults) => settings.defaults = defaults,
                Err((map, why)) => {
                    // The defaults last accepted stay until the ConfigMap is fixed.
                    eprintln!("portcullis-ingress: [error] {why}");
                    if let Some(map) =
                        map.filter(|_| reported.insert((String::new(), String::new(), why.clone())))
                    {
                        let event = Event {
                            type_: EventType::Warning,
                            reason: "Rejected".into(),
                            note: Some(why),
                            action: "AddedOrUpdated".into(),
                            secondary: None,
                        };
                        if let Err(e) = recorder.publish(&event, &map.object_ref(&())).await {
                            eprintln!("portcullis-ingress: [warn] event: {e}");
                        }
                    }
                }
            }
        }
        let cluster = watched.cluster();
        let mut generated = translate(&cluster, &settings);
        let mut text = main_config(&opts, &generated.http);
        // What failed to load last time, and what loaded instead: the same again, at once.
        if let Some((failed, instead)) = &loadable_instead {
            if *failed == text {
                generated = instead.clone();
                text = main_config(&opts, &generated.http);
            }
        }
        // A Secret renewed keeps its file's name: its bytes count as the text does.
        let files_changed = generated.files != running_files;
        if text != running || files_changed {
            let endpoints_only =
                server.is_some() && !files_changed && shape(&text) == shape(&running);
            if endpoints_only && endpoints(server.as_ref(), &generated.upstreams) {
                // Only endpoints moved: the groups' servers change in place, no reload.
                eprintln!("portcullis-ingress: [notice] endpoints updated without a reload");
                let _ = write_file(&opts.dir.join("nginx.conf"), text.as_bytes());
                running = text;
            } else {
                let mut applied = apply(&opts, &text, &generated.files, &mut server);
                if let Err(e) = &applied {
                    // Which Ingresses make it fail: left out, the others applied.
                    let check = |g: &portcullis_ingress::Generated| {
                        loads(&opts, &main_config(&opts, &g.http), &g.files)
                    };
                    if let Some(instead) = portcullis_ingress::loadable(&cluster, &settings, check)
                    {
                        eprintln!("portcullis-ingress: [error] {e}; applied without the Ingresses it names");
                        loadable_instead = Some((text, instead.clone()));
                        generated = instead;
                        text = main_config(&opts, &generated.http);
                        applied = apply(&opts, &text, &generated.files, &mut server);
                    }
                }
                match applied {
                    Ok(()) => {
                        eprintln!("portcullis-ingress: [notice] configuration applied");
                        running = text;
                        running_files = generated.files.clone();
                        // Servers the API set in a group kept by the reload are the cluster's.
                        endpoints(server.as_ref(), &generated.upstreams);
                    }
                    // The configuration running keeps serving.
                    Err(e) => eprintln!("portcullis-ingress: [error] {e}"),
                }
            }
        }
        if let Some(address) = &opts.status_address {
            status(&client, &cluster, &generated.applied, address).await;
        }
        if let Some(stores) = watched.gateway_api.get() {
            gateway_status(&client, stores, &generated.statuses).await;
        }
        for problem in &generated.problems {
            let key = (
                problem.namespace.clone(),
                problem.name.clone(),
                problem.reason.clone(),
            );
            if reported.contains(&key) {
                continue;
            }
            let ingress = (cluster.ingresses.iter()).find(|i| {
                i.metadata.namespace.as_deref() == Some(&problem.namespace)
                    && i.metadata.name.as_deref() == Some(&problem.name)
            });
            if let Some(ingress) = ingress {
                let event = Event {
                    type_: EventType::Warning,
                    reason: "Rejected".into(),
                    note: Some(problem.reason.clone()),
                    action: "AddedOrUpdated".into(),
                    secondary: None,
                };
                match recorder.publish(&event, &ingress.object_ref(&())).await {
                    Ok(()) => {
                        reported.insert(key);
                    }
                    Err(e) => eprintln!("portcullis-ingress: [warn] event: {e}"),
                }
            }
        }
        watched.changed.notified().await;
        // Changes come in bursts (a rollout): one configuration for the burst.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The defaults the controller's ConfigMap gives (none while it is missing); refused, the
/// ConfigMap and why.
#[allow(clippy::type_complexity)]
fn config_defaults(
    store: &Store<ConfigMap>,
    snippets: bool,
) -> Result<std::collections::BTreeMap<String, String>, (Option<Arc<ConfigMap>>, String)> {
    let Some(map) = store.state().into_iter().next() else {
        return Ok(Default::default());
    };
    let data = map.data.clone().unwrap_or_default();
    portcullis_ingress::config_map(&data, snippets).map_err(|why| {
        let name = map.metadata.name.clone().unwrap_or_default();
        (Some(map), format!("ConfigMap \"{name}\": {why}"))
    })
}

/// Writes `address` into the status of each Ingress applied that does not say it yet.
async fn status(client: &Client, cluster: &Cluster, applied: &BTreeSet<String>, address: &str) {
    let entry = match address.parse::<std::net::IpAddr>() {
        Ok(_) => serde_json::json!({"ip": address}),
        Err(_) => serde_json::json!({"hostname": address}),
    };
    let want = serde_json::json!([entry]);
    for ingress in &cluster.ingresses {
        let (Some(namespace), Some(name)) = (&ingress.metadata.namespace, &ingress.metadata.name)
        else {
            continue;
        };
        if !applied.contains(&format!("{namespace}/{name}")) {
            continue;
        }
        let now = (ingress.status.as_ref())
            .and_then(|s| s.load_balancer.as_ref())
            .map(|lb| serde_json::to_value(&lb.ingress).unwrap_or_default());
        if now.as_ref() == Some(&want) {
            continue;
        }
        let patch = serde_json::json!({"status": {"loadBalancer": {"ingress": want}}});
        let api: Api<Ingress> = Api::namespaced(client.clone(), namespace);
        let params = kube::api::PatchParams::default();
        if let Err(e) = api
            .patch_status(name, &params, &kube::api::Patch::Merge(&patch))
            .await
        {
            eprintln!("portcullis-ingress: [warn] status of {namespace}/{name}: {e}");
        }
    }
}

/// Writes each Gateway API object's status where it should say something else than it
/// does: a condition keeps its `lastTransitionTime` while its status stays.
async fn gateway_status(client: &Client, stores: &GatewayStores, wanted: &[gateway::Status]) {
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    for want in wanted {
        let (resource, store) = &stores[match want.kind {
            "GatewayClass" => 0,
            "Gateway" => 1,
            _ => 2,
        }];
        let Some(object) = store.state().into_iter().find(|o| {
            o.metadata.name.as_deref() == Some(&want.name)
                && o.metadata.namespace.as_deref().unwrap_or("") == want.namespace
        }) else {
            continue;
        };
        let current = object.data.get("status").cloned().unwrap_or_default();
        let status = gateway::with_times(&want.status, &current, &now);
        if status == current {
            continue;
        }
        let api: Api<DynamicObject> = if want.namespace.is_empty() {
            Api::all_with(client.clone(), resource)
        } else {
            Api::namespaced_with(client.clone(), &want.namespace, resource)
        };
        let patch = serde_json::json!({"status": status});
        let params = kube::api::PatchParams::default();
        if let Err(e) = api
            .patch_status(&want.name, &params, &kube::api::Patch::Merge(&patch))
            .await
        {
            eprintln!(
                "portcullis-ingress: [warn] status of {} {}/{}: {e}",
                want.kind, want.namespace, want.name
            );
        }
    }
}

/// A configuration without its groups' `server` lines: two of the same shape differ only in
/// endpoints.
fn shape(text: &str) -> String {
    let server_line = |l: &&str| l.starts_with("    server ") && l.ends_with(';');
    text.lines()
        .filter(|l| !server_line(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Gives each group its servers in the running configuration; false if one could not be
/// (then a reload does it).
fn endpoints(
    server: Option<&portcullis_server::Server>,
    upstreams: &std::collections::BTreeMap<String, Vec<String>>,
) -> bool {
    let Some(server) = server else {
        return false;
    };
    upstreams.iter().all(|(name, servers)| {
        server
            .set_upstream_servers(name, servers)
            .map_err(|e| eprintln!("portcullis-ingress: [warn] upstream {name}: {e}"))
            .is_ok()
    })
}

/// The whole configuration around the `http` block's contents, with the probes' server:
/// it listens once the cluster's configuration is served, so that `/ready` answering means
/// ready.
fn main_config(opts: &Options, http: &str) -> String {
    let health = match opts.health_port {
        0 => String::new(),
        port => format!(
            "server {{\n    listen {port};\n    location = /ready {{ return 200 \"ready\\n\"; }}\n    \
             location = /live {{ return 200 \"live\\n\"; }}\n    location / {{ return 404; }}\n}}\n"
        ),
    };
    format!(
        "worker_processes {};\nerror_log stderr notice;\n\
         events {{\n    worker_connections 8192;\n}}\n\
         http {{\n    access_log off;\n{http}{health}}}\n",
        opts.workers
    )
}

/// Whether the server loads `text` with `files` (written where it names them).
fn loads(
    opts: &Options,
    text: &str,
    files: &std::collections::BTreeMap<PathBuf, Vec<u8>>,
) -> Result<(), String> {
    compiled(opts, text, files).map(drop)
}

/// `text` compiled as the server runs it, the files it names written first.
fn compiled(
    opts: &Options,
    text: &str,
    files: &std::collections::BTreeMap<PathBuf, Vec<u8>>,
) -> Result<portcullis_server::Compiled, String> {
    for (path, bytes) in files {
        write_file(path, bytes)?;
    }
    let conf = opts.dir.join("nginx.conf");
    let loaded =
        portcullis_config::load_str(text, &conf, &Default::default()).map_err(|e| e.to_string())?;
    portcullis_server::compile(&loaded, &opts.dir, None).map_err(|e| e.to_string())
}

/// Writes the files `text` names and starts the server on it, or swaps it in.
fn apply(
    opts: &Options,
    text: &str,
    files: &std::collections::BTreeMap<PathBuf, Vec<u8>>,
    server: &mut Option<portcullis_server::Server>,
) -> Result<(), String> {
    write_file(&opts.dir.join("nginx.conf"), text.as_bytes())?;
    let compiled = compiled(opts, text, files)?;
    match server {
        Some(s) => s.reload(compiled).map_err(|e| e.to_string()),
        None => {
            *server = Some(portcullis_server::Server::start(compiled).map_err(|e| e.to_string())?);
            Ok(())
        }
    }
}

/// Writes `bytes` at `path` whole, through a file renamed over it.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let mut temp = path.as_os_str().to_owned();
    temp.push(".new");
    std::fs::write(&temp, bytes)
        .and_then(|()| std::fs::rename(&temp, path))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The default server's certificate: made once, self-signed, as NGINX Ingress Controller's
/// default is.
fn default_certificate(dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    let (crt, key) = (dir.join("default.crt"), dir.join("default.key"));
    if crt.exists() && key.exists() {
        return Ok((crt, key));
    }
    let made = rcgen::KeyPair::generate().and_then(|k| {
        let params = rcgen::CertificateParams::new(vec!["portcullis-ingress-default".into()])?;
        Ok((params.self_signed(&k)?, k))
    });
    let (cert, k) = made.map_err(|e| format!("default certificate: {e}"))?;
    write_file(&key, k.serialize_pem().as_bytes())?;
    write_file(&crt, cert.pem().as_bytes())?;
    Ok((crt, key))
}
