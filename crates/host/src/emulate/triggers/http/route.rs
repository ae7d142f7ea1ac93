//! Which HTTP function a request's path names: the route prefix, and route templates matched
//! as ASP.NET's routing matches them.

use std::collections::BTreeMap;

use super::RouteError;

/// The rest of `path` after `/{prefix}` (a whole segment), or `None` outside it.
pub(super) fn strip_prefix<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let path = path.trim_start_matches('/');
    if prefix.is_empty() {
        return Some(path);
    }
    let (first, rest) = path.split_once('/').unwrap_or((path, ""));
    first.eq_ignore_ascii_case(prefix).then_some(rest)
}

pub(super) fn percent_decode(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

/// A route template: literal segments and `{name}` parameters (`{name:constraint}`,
/// `{name?}` last, `{*name}` catching the rest), matched as ASP.NET matches them, literals in
/// any case.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RouteTemplate {
    pub(super) text: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Literal(String),
    Parameter {
        name: String,
        constraint: Option<String>,
        optional: bool,
        catch_all: bool,
    },
}

impl RouteTemplate {
    pub(super) fn parse(template: &str) -> Result<Self, RouteError> {
        let text = template.trim_matches('/').to_string();
        let bad = |problem: &str| RouteError::Template {
            route: template.to_string(),
            problem: problem.to_string(),
        };
        let mut segments = Vec::new();
        let parts: Vec<&str> = text.split('/').filter(|s| !s.is_empty()).collect();
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            let segment = match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                Some(inner) => {
                    let (catch_all, inner) = match inner.strip_prefix('*') {
                        Some(rest) => (true, rest.trim_start_matches('*')),
                        None => (false, inner),
                    };
                    let (name, constraint) = match inner.split_once(':') {
                        Some((n, c)) => (n, Some(c.to_ascii_lowercase())),
                        None => (inner, None),
                    };
                    let (name, optional) = match name.strip_suffix('?') {
                        Some(n) => (n, true),
                        None => (name, false),
                    };
                    if name.is_empty() {
                        return Err(bad("a parameter without a name"));
                    }
                    if (optional || catch_all) && !last {
                        return Err(bad(
                            "an optional or catch-all parameter must be the last segment",
                        ));
                    }
                    Segment::Parameter {
                        name: name.to_string(),
                        constraint,
                        optional: optional || catch_all,
                        catch_all,
                    }
                }
                None if part.contains('{') || part.contains('}') => {
                    return Err(bad("a parameter must be a whole segment here"));
                }
                None => Segment::Literal(part.to_string()),
            };
            segments.push(segment);
        }
        Ok(RouteTemplate { text, segments })
    }

    pub(super) fn literals(&self) -> usize {
        self.segments
            .iter()
            .filter(|s| matches!(s, Segment::Literal(_)))
            .count()
    }

    /// The route's parameters when `path` (decoded segments) matches it.
    pub(super) fn matches(&self, path: &[String]) -> Option<BTreeMap<String, String>> {
        let mut params = BTreeMap::new();
        for (i, segment) in self.segments.iter().enumerate() {
            match segment {
                Segment::Literal(text) => {
                    if !path.get(i)?.eq_ignore_ascii_case(text) {
                        return None;
                    }
                }
                Segment::Parameter {
                    name,
                    constraint,
                    optional,
                    catch_all,
                } => {
                    let value = if *catch_all {
                        path.get(i..).map(|rest| rest.join("/")).unwrap_or_default()
                    } else {
                        match path.get(i) {
                            Some(v) => v.clone(),
                            None if *optional => continue,
                            None => return None,
                        }
                    };
                    if !value.is_empty() && !satisfies(constraint.as_deref(), &value) {
                        return None;
                    }
                    if !value.is_empty() {
                        params.insert(name.clone(), value);
                    }
                    if *catch_all {
                        return Some(params);
                    }
                }
            }
        }
        (path.len() <= self.segments.len()).then_some(params)
    }
}

/// ASP.NET's common route constraints; others are not checked.
fn satisfies(constraint: Option<&str>, value: &str) -> bool {
    match constraint {
        Some("int") => value.parse::<i32>().is_ok(),
        Some("long") => value.parse::<i64>().is_ok(),
        Some("bool") => value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("false"),
        Some("alpha") => value.chars().all(|c| c.is_ascii_alphabetic()),
        Some("guid") => uuid::Uuid::parse_str(value).is_ok(),
        Some("double") | Some("float") | Some("decimal") => value.parse::<f64>().is_ok(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(path: &str) -> Vec<String> {
        path.split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn routes_match_as_aspnet_matches_them() {
        let route = RouteTemplate::parse("items/{id:int}/{part?}").unwrap();
        let params = route.matches(&segments("Items/7/tail")).unwrap();
        assert_eq!(params["id"], "7");
        assert_eq!(params["part"], "tail");
        assert!(route.matches(&segments("items/7")).is_some());
        assert!(
            route.matches(&segments("items/x")).is_none(),
            "int constraint"
        );
        assert!(route.matches(&segments("items")).is_none());
        assert!(route.matches(&segments("items/7/a/b")).is_none());
        let all = RouteTemplate::parse("dashboard/{*path}").unwrap();
        assert_eq!(
            all.matches(&segments("dashboard/a/b.js")).unwrap()["path"],
            "a/b.js"
        );
        assert!(all.matches(&segments("dashboard")).unwrap().is_empty());
        assert!(RouteTemplate::parse("a/{*rest}/b").is_err());
        assert!(RouteTemplate::parse("a/x{y}").is_err());
        assert_eq!(strip_prefix("/api/Health", "api"), Some("Health"));
        assert_eq!(strip_prefix("/apis/Health", "api"), None);
        assert_eq!(strip_prefix("/Health", ""), Some("Health"));
    }
}
