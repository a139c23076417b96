//! `$(VAR)` expansion of exec probe commands, as the kubelet does it
//! (`ExpandContainerCommandOnlyStatic` over the forked Go `expansion`
//! package): only the container's own `env` is visible (E1, E2).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::EnvVar;

/// Expands every element of `command` on its own, with the variables of
/// `env` (E1). An empty command stays empty.
pub fn expand_command(command: &[String], env: &[EnvVar]) -> Vec<String> {
    let vars = env_map(env);
    command.iter().map(|arg| expand(arg, &vars)).collect()
}

/// The variables a command can see: every `env` entry by name with its
/// literal `value`. Entries set through `valueFrom` have no literal value and
/// so expand to "" (not left as written); a later entry replaces an earlier
/// one of the same name (E2).
pub fn env_map(env: &[EnvVar]) -> HashMap<&str, &str> {
    env.iter()
        .map(|e| (e.name.as_str(), e.value.as_deref().unwrap_or("")))
        .collect()
}

/// Expands `$(NAME)` references in `input` (E2):
/// - `$(NAME)` becomes the value of NAME, or stays as written if NAME is not
///   in `vars`; values are not expanded again;
/// - `$$` becomes `$`, so `$$(A)` gives `$(A)`;
/// - a `$` followed by anything else, a `$` at the end, and an unterminated
///   `$(A` are kept as written; `$()` looks up the empty name and so stays.
///
/// The reference ends at the first `)`, so references do not nest.
///
/// One deliberate difference: Go's code turns the byte after a lone `$` into
/// a rune, which mangles a multi-byte character there (`$é`) into invalid
/// UTF-8; here such text is kept as written.
pub fn expand(input: &str, vars: &HashMap<&str, &str>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        rest = if let Some(escaped) = after.strip_prefix('$') {
            out.push('$');
            escaped
        } else if let Some((name, tail)) = after.strip_prefix('(').and_then(|r| r.split_once(')')) {
            match vars.get(name) {
                Some(value) => out.push_str(value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            tail
        } else {
            // Not a reference, or one without its `)`: the `$` is plain
            // text and scanning goes on from the character after it.
            out.push('$');
            after
        };
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVarSource, ObjectFieldSelector};

    fn literal(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..EnvVar::default()
        }
    }

    fn from_field(name: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "status.podIP".into(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    // The table of upstream `expansion` tests (doExpansionTest), same
    // variables, same inputs, same results.
    #[test]
    fn e2_upstream_expansion_cases() {
        let vars: HashMap<&str, &str> = [
            ("VAR_A", "A"),
            ("VAR_B", "B"),
            ("VAR_C", "C"),
            ("VAR_REF", "$(VAR_A)"),
            ("VAR_EMPTY", ""),
        ]
        .into_iter()
        .collect();
        let cases = [
            ("$(VAR_A)", "A"),
            ("$(VAR_A)-$(VAR_A)", "A-A"),
            ("$(VAR_A)-1", "A-1"),
            ("___$(VAR_B)___", "___B___"),
            ("___$(VAR_C)", "___C"),
            ("$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
            ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
            ("$$(VAR_A)_$$(VAR_B)", "$(VAR_A)_$(VAR_B)"),
            ("f000-$$VAR_A", "f000-$VAR_A"),
            ("foo\\$(VAR_C)bar", "foo\\Cbar"),
            ("foo\\\\$(VAR_C)bar", "foo\\\\Cbar"),
            ("foo\\\\\\\\$(VAR_A)bar", "foo\\\\\\\\Abar"),
            ("$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"),
            ("$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"),
            ("$(VAR_REF)", "$(VAR_A)"),
            ("%%$(VAR_REF)--$(VAR_REF)%%", "%%$(VAR_A)--$(VAR_A)%%"),
            ("foo$(VAR_EMPTY)bar", "foobar"),
            ("foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"),
            ("f00__(VAR_A)__", "f00__(VAR_A)__"),
            ("$?_boo_$!", "$?_boo_$!"),
            ("$VAR_A", "$VAR_A"),
            ("$(VAR_DNE)", "$(VAR_DNE)"),
            ("$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
            ("$$$$$$(VAR_A)", "$$$(VAR_A)"),
            ("$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"),
            ("$$$$$$$(VAR_A)", "$$$A"),
            ("$VAR_A)", "$VAR_A)"),
            ("${VAR_A}", "${VAR_A}"),
            ("$(VAR_B)_______$(A", "B_______$(A"),
            ("$(VAR_C)_______$(", "C_______$("),
            ("$(VAR_A)foobarzab$", "Afoobarzab$"),
            ("foo-\\$(VAR_A", "foo-\\$(VAR_A"),
            ("--$($($($($--", "--$($($($($--"),
            ("$($($($($--foo$(", "$($($($($--foo$("),
            ("foo0--$($($($(", "foo0--$($($($("),
            ("$(foo$$var)", "$(foo$$var)"),
            ("\n", "\n"),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, &vars), want, "input {input:?}");
        }
    }

    #[test]
    fn e1_each_element_expanded_independently() {
        let env = [literal("PORT", "8080"), literal("HOST", "db")];
        let got = expand_command(
            &strings(&["sh", "-c", "nc -z $(HOST) $(PORT)", "$(PORT", ")"]),
            &env,
        );
        // "$(PORT" and ")" are separate elements, so they do not pair up.
        assert_eq!(got, strings(&["sh", "-c", "nc -z db 8080", "$(PORT", ")"]));
    }

    #[test]
    fn e1_empty_command_stays_empty() {
        assert!(expand_command(&[], &[literal("A", "a")]).is_empty());
    }

    #[test]
    fn e2_value_from_expands_to_empty() {
        let env = [from_field("POD_IP")];
        assert_eq!(
            expand_command(&strings(&["ping", "-c1", "x$(POD_IP)x"]), &env),
            strings(&["ping", "-c1", "xx"])
        );
    }

    #[test]
    fn e2_later_duplicate_wins() {
        let env = [literal("A", "first"), literal("A", "second")];
        assert_eq!(
            expand_command(&strings(&["$(A)"]), &env),
            strings(&["second"])
        );
        let env = [literal("A", "first"), from_field("A")];
        assert_eq!(
            expand_command(&strings(&["[$(A)]"]), &env),
            strings(&["[]"])
        );
    }

    #[test]
    fn e2_unknown_name_kept_literally() {
        let env = [literal("A", "a")];
        assert_eq!(
            expand_command(&strings(&["$(B)", "$(a)", "$(A)"]), &env),
            strings(&["$(B)", "$(a)", "a"])
        );
    }

    #[test]
    fn e2_escapes_and_incomplete_references() {
        let env = [literal("A", "a")];
        let got = expand_command(
            &strings(&["$$(A)", "$(A", "$()", "$", "$x", "cost: 5$"]),
            &env,
        );
        assert_eq!(got, strings(&["$(A)", "$(A", "$()", "$", "$x", "cost: 5$"]));
    }

    #[test]
    fn e2_non_ascii_text_is_kept() {
        let env = [literal("GREETING", "grüß")];
        assert_eq!(
            expand_command(&strings(&["$(GREETING) 世界 $é"]), &env),
            strings(&["grüß 世界 $é"])
        );
    }
}
