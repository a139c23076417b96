//! `$(VAR)` expansion of exec probe commands, as the kubelet does it
//! (`ExpandContainerCommandOnlyStatic` over the forked Go `expansion`
//! package): only the container's own `env` is visible (E1, E2).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::EnvVar;

/// The most bytes an expanded exec command may hold, all arguments
/// together: Linux's `ARG_MAX` with the default 8 MiB stack (a quarter of
/// it). A longer command cannot be exec'd in the container under the
/// kubelet either (`E2BIG`), so refusing it turns away no probe that could
/// ever succeed, and it bounds what a `$(VAR)` bomb (one large variable
/// referenced thousands of times) can make podprobe allocate.
pub const MAX_EXPANDED_COMMAND_BYTES: usize = 2 * 1024 * 1024;

/// A command whose expansion would pass [`MAX_EXPANDED_COMMAND_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandTooLong;

/// Expands every element of `command` on its own, with the variables of
/// `env` (E1). An empty command stays empty. Stops, without allocating
/// more, as soon as the expansion would pass [`MAX_EXPANDED_COMMAND_BYTES`].
pub fn expand_command(command: &[String], env: &[EnvVar]) -> Result<Vec<String>, CommandTooLong> {
    let vars = env_map(env);
    let mut left = MAX_EXPANDED_COMMAND_BYTES;
    command
        .iter()
        .map(|arg| {
            let expanded = expand_within(arg, &vars, left)?;
            left -= expanded.len();
            Ok(expanded)
        })
        .collect()
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
    expand_within(input, vars, usize::MAX).unwrap_or_default()
}

/// [`expand`], or [`CommandTooLong`] as soon as the result would pass
/// `limit` bytes.
fn expand_within(
    input: &str,
    vars: &HashMap<&str, &str>,
    limit: usize,
) -> Result<String, CommandTooLong> {
    let mut out = Bounded {
        text: String::with_capacity(input.len().min(limit)),
        limit,
    };
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push(&rest[..at])?;
        let after = &rest[at + 1..];
        rest = if let Some(escaped) = after.strip_prefix('$') {
            out.push("$")?;
            escaped
        } else if let Some((name, tail)) = after.strip_prefix('(').and_then(|r| r.split_once(')')) {
            match vars.get(name) {
                Some(value) => out.push(value)?,
                None => {
                    out.push("$(")?;
                    out.push(name)?;
                    out.push(")")?;
                }
            }
            tail
        } else {
            // Not a reference, or one without its `)`: the `$` is plain
            // text and scanning goes on from the character after it.
            out.push("$")?;
            after
        };
    }
    out.push(rest)?;
    Ok(out.text)
}

/// A string that refuses to grow past `limit` bytes.
struct Bounded {
    text: String,
    limit: usize,
}

impl Bounded {
    fn push(&mut self, s: &str) -> Result<(), CommandTooLong> {
        if s.len() > self.limit - self.text.len() {
            return Err(CommandTooLong);
        }
        self.text.push_str(s);
        Ok(())
    }
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
        let got = expanded(
            &strings(&["sh", "-c", "nc -z $(HOST) $(PORT)", "$(PORT", ")"]),
            &env,
        );
        // "$(PORT" and ")" are separate elements, so they do not pair up.
        assert_eq!(got, strings(&["sh", "-c", "nc -z db 8080", "$(PORT", ")"]));
    }

    #[test]
    fn e1_empty_command_stays_empty() {
        assert!(expanded(&[], &[literal("A", "a")]).is_empty());
    }

    #[test]
    fn e2_value_from_expands_to_empty() {
        let env = [from_field("POD_IP")];
        assert_eq!(
            expanded(&strings(&["ping", "-c1", "x$(POD_IP)x"]), &env),
            strings(&["ping", "-c1", "xx"])
        );
    }

    #[test]
    fn e2_later_duplicate_wins() {
        let env = [literal("A", "first"), literal("A", "second")];
        assert_eq!(expanded(&strings(&["$(A)"]), &env), strings(&["second"]));
        let env = [literal("A", "first"), from_field("A")];
        assert_eq!(expanded(&strings(&["[$(A)]"]), &env), strings(&["[]"]));
    }

    #[test]
    fn e2_unknown_name_kept_literally() {
        let env = [literal("A", "a")];
        assert_eq!(
            expanded(&strings(&["$(B)", "$(a)", "$(A)"]), &env),
            strings(&["$(B)", "$(a)", "a"])
        );
    }

    #[test]
    fn e2_escapes_and_incomplete_references() {
        let env = [literal("A", "a")];
        let got = expanded(
            &strings(&["$$(A)", "$(A", "$()", "$", "$x", "cost: 5$"]),
            &env,
        );
        assert_eq!(got, strings(&["$(A)", "$(A", "$()", "$", "$x", "cost: 5$"]));
    }

    #[test]
    fn e2_non_ascii_text_is_kept() {
        let env = [literal("GREETING", "grüß")];
        assert_eq!(
            expanded(&strings(&["$(GREETING) 世界 $é"]), &env),
            strings(&["grüß 世界 $é"])
        );
    }

    fn expanded(command: &[String], env: &[EnvVar]) -> Vec<String> {
        expand_command(command, env).expect("within the limit")
    }

    #[test]
    fn an_expansion_bomb_is_refused_without_being_built() {
        // 100 KB referenced 2,000 times: 200 MB if expanded.
        let big = "x".repeat(100_000);
        let env = [literal("A", &big)];
        let bomb = vec!["$(A) ".repeat(2_000)];
        assert_eq!(expand_command(&bomb, &env), Err(CommandTooLong));
        // Across arguments too.
        let many = vec!["$(A)".to_string(); 21];
        assert_eq!(expand_command(&many, &env), Err(CommandTooLong));
        // Exactly at the limit is fine.
        let env = [literal("B", &"y".repeat(MAX_EXPANDED_COMMAND_BYTES / 2))];
        let two = strings(&["$(B)", "$(B)"]);
        assert_eq!(
            expand_command(&two, &env).map(|c| c.concat().len()),
            Ok(MAX_EXPANDED_COMMAND_BYTES)
        );
        let three = strings(&["$(B)", "$(B)", "z"]);
        assert_eq!(expand_command(&three, &env), Err(CommandTooLong));
    }
}
