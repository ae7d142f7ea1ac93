//! The infrastructure template (`deploy/azuredeploy.json`), checked as far as this machine can
//! without Azure: its own consistency (every expression's parentheses and quotes, every
//! parameter and variable it refers to, every resource a `dependsOn` names), the Flex
//! Consumption shape the docs describe (plan FC1, the `custom` runtime in `functionAppConfig`,
//! no `FUNCTIONS_WORKER_RUNTIME` setting, no secret in a setting, deployment storage and every
//! connection through the managed identity), and that it provides what the app in
//! `function_app/` uses: each trigger's and output's event hub and consumer group, each
//! connection as an identity-based setting, and the roles the identity needs for them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn template() -> Value {
    let path = repo().join("deploy/azuredeploy.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every string in the document, with where it is.
fn strings<'a>(value: &'a Value, at: String, out: &mut Vec<(String, &'a str)>) {
    match value {
        Value::String(s) => out.push((at, s)),
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                strings(v, format!("{at}[{i}]"), out);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                strings(v, format!("{at}.{k}"), out);
            }
        }
        _ => {}
    }
}

/// An ARM expression's calls of `function('literal')`.
fn calls<'a>(expression: &'a str, function: &str) -> Vec<&'a str> {
    let needle = format!("{function}('");
    expression
        .match_indices(&needle)
        .filter(|(i, _)| {
            // Not the tail of a longer name (e.g. subscriptionResourceId vs resourceId).
            !expression[..*i]
                .chars()
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric())
        })
        .filter_map(|(i, _)| {
            let rest = &expression[i + needle.len()..];
            rest.find('\'').map(|end| &rest[..end])
        })
        .collect()
}

/// Parentheses and single-quoted literals balance (`''` is a quote inside a literal).
fn balanced(expression: &str) -> bool {
    let mut depth = 0i32;
    let mut in_literal = false;
    let mut chars = expression.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, in_literal) {
            ('\'', true) if chars.peek() == Some(&'\'') => {
                chars.next();
            }
            ('\'', _) => in_literal = !in_literal,
            ('(', false) => depth += 1,
            (')', false) => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => {}
        }
    }
    depth == 0 && !in_literal
}

/// The value of a template string, for the forms names are written in here: a literal, or an
/// expression of `concat`, `variables`, `parameters` (their defaults) and literals. Any other
/// function (evaluated only in Azure, such as `uniqueString`) stands for itself as `<…>`, so the
/// same expression gives the same value wherever it is used.
fn evaluate(t: &Value, text: &str) -> Option<String> {
    match text.strip_prefix('[').and_then(|e| e.strip_suffix(']')) {
        Some(expression) => eval_expression(t, expression.trim()),
        None => Some(text.to_string()),
    }
}

fn eval_expression(t: &Value, e: &str) -> Option<String> {
    if let Some(literal) = e.strip_prefix('\'').and_then(|l| l.strip_suffix('\'')) {
        return Some(literal.replace("''", "'"));
    }
    let (function, args) = e.split_once('(')?;
    let args = args.strip_suffix(')')?;
    let args = split_arguments(args);
    match function.trim() {
        "concat" => args.iter().map(|a| eval_expression(t, a)).collect(),
        "variables" => evaluate(t, t["variables"][eval_expression(t, &args[0])?].as_str()?),
        "parameters" => {
            // A parameter without a default (the app's name) stands for itself.
            let name = eval_expression(t, &args[0])?;
            match &t["parameters"][&name]["defaultValue"] {
                Value::String(s) => evaluate(t, s),
                Value::Number(n) => Some(n.to_string()),
                Value::Null => Some(format!("<{name}>")),
                _ => None,
            }
        }
        _ => Some(format!("<{e}>")),
    }
}

fn split_arguments(args: &str) -> Vec<String> {
    let (mut out, mut current, mut depth, mut in_literal) = (Vec::new(), String::new(), 0, false);
    for c in args.chars() {
        match c {
            '\'' => in_literal = !in_literal,
            '(' if !in_literal => depth += 1,
            ')' if !in_literal => depth -= 1,
            ',' if !in_literal && depth == 0 => {
                out.push(current.trim().to_string());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_string());
    }
    out
}

fn resources(t: &Value) -> &Vec<Value> {
    t["resources"].as_array().expect("resources")
}

fn of_type<'a>(t: &'a Value, kind: &str) -> Vec<&'a Value> {
    resources(t)
        .iter()
        .filter(|r| r["type"].as_str().unwrap().eq_ignore_ascii_case(kind))
        .collect()
}

#[test]
fn the_template_is_consistent_in_itself() {
    let t = template();
    assert_eq!(
        t["$schema"],
        "https://schema.management.azure.com/schemas/2019-04-01/deploymentTemplate.json#"
    );
    let mut all = Vec::new();
    strings(&t, String::new(), &mut all);
    let parameters: BTreeSet<&str> = t["parameters"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let variables: BTreeSet<&str> = t["variables"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut used_parameters = BTreeSet::new();
    for (at, s) in &all {
        if !(s.starts_with('[') && s.ends_with(']')) {
            continue;
        }
        assert!(balanced(s), "{at}: unbalanced expression {s}");
        for p in calls(s, "parameters") {
            assert!(parameters.contains(p), "{at}: no parameter {p}");
            used_parameters.insert(p);
        }
        for v in calls(s, "variables") {
            assert!(variables.contains(v), "{at}: no variable {v}");
        }
    }
    assert_eq!(
        used_parameters, parameters,
        "every parameter is used somewhere"
    );
    // Every resource is whole, and what a dependsOn names is declared here.
    let declared: BTreeSet<String> = resources(&t)
        .iter()
        .map(|r| r["type"].as_str().unwrap().to_ascii_lowercase())
        .collect();
    for r in resources(&t) {
        let kind = r["type"].as_str().expect("type");
        let version = r["apiVersion"].as_str().expect("apiVersion");
        assert!(
            version.len() >= 10 && version[..10].chars().filter(|c| *c == '-').count() == 2,
            "{kind}: apiVersion {version}"
        );
        let name = r["name"].as_str().expect("name");
        assert!(!name.is_empty());
        for dependency in r["dependsOn"].as_array().into_iter().flatten() {
            let dependency = dependency.as_str().unwrap();
            let named = calls(dependency, "resourceId");
            assert_eq!(named.len(), 1, "{kind}: dependsOn {dependency}");
            assert!(
                declared.contains(&named[0].to_ascii_lowercase()),
                "{kind} depends on {} which the template does not declare",
                named[0]
            );
        }
    }
    // The checks above can fail.
    assert!(!balanced("[concat('a', variables('b')]"));
    assert!(!balanced("[concat('it''s)]"));
    assert_eq!(
        calls("[subscriptionResourceId('x')]", "resourceId"),
        Vec::<&str>::new()
    );
}

#[test]
fn a_flex_consumption_app_with_the_custom_runtime_and_no_secret() {
    let t = template();
    let plans = of_type(&t, "Microsoft.Web/serverfarms");
    assert_eq!(plans.len(), 1);
    assert_eq!(plans[0]["sku"]["name"], "FC1");
    assert_eq!(plans[0]["sku"]["tier"], "FlexConsumption");
    assert_eq!(plans[0]["properties"]["reserved"], true, "Linux");
    let sites = of_type(&t, "Microsoft.Web/sites");
    assert_eq!(sites.len(), 1);
    let site = sites[0];
    assert!(site["kind"].as_str().unwrap().contains("linux"));
    assert_eq!(site["identity"]["type"], "SystemAssigned");
    let config = &site["properties"]["functionAppConfig"];
    assert_eq!(config["runtime"]["name"], "custom");
    assert_eq!(
        config["deployment"]["storage"]["authentication"]["type"],
        "SystemAssignedIdentity"
    );
    let settings: BTreeMap<&str, &str> = site["properties"]["siteConfig"]["appSettings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["value"].as_str().unwrap()))
        .collect();
    // Flex takes the runtime from functionAppConfig and refuses these settings.
    for refused in [
        "FUNCTIONS_WORKER_RUNTIME",
        "FUNCTIONS_EXTENSION_VERSION",
        "WEBSITE_RUN_FROM_PACKAGE",
    ] {
        assert!(!settings.contains_key(refused), "{refused}");
    }
    assert!(settings.contains_key("AzureWebJobsStorage__accountName"));
    for (name, value) in &settings {
        for secret in ["AccountKey", "SharedAccessKey", "listKeys", "Password"] {
            assert!(!value.contains(secret), "{name} carries a secret");
        }
    }
    let storage = of_type(&t, "Microsoft.Storage/storageAccounts");
    assert_eq!(storage[0]["properties"]["allowSharedKeyAccess"], false);
    let namespace = of_type(&t, "Microsoft.EventHub/namespaces");
    assert_eq!(namespace[0]["properties"]["disableLocalAuth"], true);
}

/// The app's functions as function.json says: (connection setting, hub, consumer group or
/// None for an output).
fn bindings(app: &Path) -> Vec<(String, String, Option<String>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(app).unwrap() {
        let path = entry.unwrap().path().join("function.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let function: Value = serde_json::from_str(&text).unwrap();
        for b in function["bindings"].as_array().unwrap() {
            let kind = b["type"].as_str().unwrap();
            if kind != "eventHubTrigger" && kind != "eventHub" {
                continue;
            }
            out.push((
                b["connection"]
                    .as_str()
                    .unwrap_or("EventHubConnection")
                    .to_string(),
                b["eventHubName"].as_str().unwrap().to_string(),
                (kind == "eventHubTrigger").then(|| {
                    b["consumerGroup"]
                        .as_str()
                        .unwrap_or("$Default")
                        .to_string()
                }),
            ));
        }
    }
    out
}

#[test]
fn it_provides_every_hub_consumer_group_connection_and_role_the_app_uses() {
    let t = template();
    let site = of_type(&t, "Microsoft.Web/sites")[0];
    let settings: BTreeMap<String, String> = site["properties"]["siteConfig"]["appSettings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                evaluate(&t, s["value"].as_str().unwrap()).unwrap_or_default(),
            )
        })
        .collect();
    let names = |kind: &str| -> BTreeSet<String> {
        of_type(&t, kind)
            .iter()
            .map(|r| evaluate(&t, r["name"].as_str().unwrap()).expect("a name evaluates"))
            .collect()
    };
    let namespace = names("Microsoft.EventHub/namespaces")
        .into_iter()
        .next()
        .unwrap();
    let hubs = names("Microsoft.EventHub/namespaces/eventhubs");
    let groups = names("Microsoft.EventHub/namespaces/eventhubs/consumergroups");
    let used = bindings(&repo().join("function_app"));
    assert!(used.len() >= 3, "{used:?}");
    for (connection, hub, group) in &used {
        // %Setting% names resolve through the app settings the template writes.
        let hub = match hub.strip_prefix('%').and_then(|h| h.strip_suffix('%')) {
            Some(setting) => settings
                .get(setting)
                .unwrap_or_else(|| panic!("no app setting {setting}"))
                .clone(),
            None => hub.clone(),
        };
        assert!(
            hubs.contains(&format!("{namespace}/{hub}")),
            "no event hub {hub}"
        );
        if let Some(group) = group
            .as_deref()
            .filter(|g| !g.eq_ignore_ascii_case("$Default"))
        {
            assert!(
                groups.contains(&format!("{namespace}/{hub}/{group}")),
                "no consumer group {group} on {hub}"
            );
        }
        assert_eq!(
            settings.get(&format!("{connection}__fullyQualifiedNamespace")),
            Some(&format!("{namespace}.servicebus.windows.net")),
            "{connection} is not an identity-based connection to the namespace"
        );
    }
    // The identity's roles: blobs (host storage, deployment package, checkpoints, the app's
    // data), receiving (triggers) and sending (eventHub outputs), each on its resource.
    let roles: BTreeSet<(String, String)> = of_type(&t, "Microsoft.Authorization/roleAssignments")
        .iter()
        .map(|r| {
            let role = calls(
                r["properties"]["roleDefinitionId"].as_str().unwrap(),
                "variables",
            )[0];
            let scope = r["scope"].as_str().unwrap();
            assert!(
                r["properties"]["principalId"]
                    .as_str()
                    .unwrap()
                    .contains("identity.principalId")
            );
            let scope_type = if scope.contains("Microsoft.Storage") {
                "storage"
            } else {
                "eventhubs"
            };
            (
                evaluate(&t, &format!("[variables('{role}')]")).unwrap(),
                scope_type.to_string(),
            )
        })
        .collect();
    let owner = "b7e6dc6d-f1e8-4753-8033-0f276bb0955b".to_string();
    let receiver = "a638d3c7-ab3a-418d-83e6-5f17a39d4fde".to_string();
    let sender = "2b629674-e913-4c01-ae53-ef4638d8f975".to_string();
    assert!(roles.contains(&(owner, "storage".into())), "{roles:?}");
    assert!(roles.contains(&(receiver, "eventhubs".into())), "{roles:?}");
    if used.iter().any(|(_, _, group)| group.is_none()) {
        assert!(roles.contains(&(sender, "eventhubs".into())), "{roles:?}");
    }
}
