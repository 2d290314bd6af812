//! The `classes=` of an adaptive `Policy`: the proxy's `[[policy.class]]` tables as
//! Python dicts, their conditions built by floodgate-http's `ClassMatch::conditions`.

use floodgate_http::adaptive::{ClassMatch, ClassSpec};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// An adaptive policy's `classes=`: a list of `{"name", "share", "match"}` dicts, as the
/// proxy's `[[policy.class]]` tables; `Err` names the class and field.
pub(super) fn class_list(
    c: &Bound<'_, PyAny>,
) -> Result<(Vec<ClassSpec>, Vec<Vec<ClassMatch>>), String> {
    let list = c
        .cast::<PyList>()
        .map_err(|_| "expected a list of dicts".to_string())?;
    let mut specs = Vec::with_capacity(list.len());
    let mut matches = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let d = item
            .cast::<PyDict>()
            .map_err(|_| format!("class[{i}]: expected a dict"))?;
        for k in d.keys() {
            let k: String = k
                .extract()
                .map_err(|_| format!("class[{i}]: keys must be str"))?;
            if !["name", "share", "match"].contains(&k.as_str()) {
                return Err(format!(
                    "class[{i}]: unknown field {k:?} (name, share, match)"
                ));
            }
        }
        let name: String = d
            .get_item("name")
            .ok()
            .flatten()
            .and_then(|v| v.extract().ok())
            .ok_or_else(|| format!("class[{i}]: name: a str is required"))?;
        let share: f64 = d
            .get_item("share")
            .ok()
            .flatten()
            .and_then(|v| v.extract().ok())
            .ok_or_else(|| format!("class[{i}] {name:?}: share: a number in [0, 1] is required"))?;
        let conds = match d.get_item("match").ok().flatten() {
            None => Vec::new(),
            Some(m) => {
                let m = m
                    .cast::<PyDict>()
                    .map_err(|_| format!("class[{i}] {name:?}: match: expected a dict"))?;
                let field = |f: &str| -> Result<Option<String>, String> {
                    m.get_item(f)
                        .ok()
                        .flatten()
                        .map(|v| {
                            v.extract::<String>().map_err(|_| {
                                format!("class[{i}] {name:?}: match.{f}: expected a str")
                            })
                        })
                        .transpose()
                };
                for k in m.keys() {
                    let k: String = k.extract().unwrap_or_default();
                    if !["header", "value", "method", "route", "key"].contains(&k.as_str()) {
                        return Err(format!(
                            "class[{i}] {name:?}: match: unknown field {k:?} (header, value, method, route, key)"
                        ));
                    }
                }
                let (h, v, me, r, k) = (
                    field("header")?,
                    field("value")?,
                    field("method")?,
                    field("route")?,
                    field("key")?,
                );
                ClassMatch::conditions(
                    h.as_deref(),
                    v.as_deref(),
                    me.as_deref(),
                    r.as_deref(),
                    k.as_deref(),
                )
                .map_err(|e| format!("class[{i}] {name:?}: {e}"))?
            }
        };
        specs.push(ClassSpec { name, share });
        matches.push(conds);
    }
    Ok((specs, matches))
}
