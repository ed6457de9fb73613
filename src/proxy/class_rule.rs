//! Which class a proxied session belongs to ([proxy](docs/proxy.md)): a rule on one
//! startup parameter, as operators already tag sessions (`application_name`
//! set by the application, a user per tier, or a database per tier). A
//! value that starts with the rule's prefix is Premium; any other, or a
//! missing parameter, gets the default class.

use super::startup::Startup;
use crate::core::model::Class;
use serde::Deserialize;

/// The startup parameter a rule reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Param {
    /// `application_name` (libpq's `application_name=`, pgbench's `PGAPPNAME`).
    ApplicationName,
    /// `user`.
    User,
    /// `database` (the user's name when the client sends none).
    Database,
}

impl Param {
    fn name(self) -> &'static str {
        match self {
            Param::ApplicationName => "application_name",
            Param::User => "user",
            Param::Database => "database",
        }
    }
}

/// `[class]` of a proxy config: `param`, `premium_prefix`, `default`; each
/// has a default, so a proxy runs without a config: `application_name`
/// starting with `premium` is Premium, every other session Freemium.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassRule {
    /// The parameter read [default: application_name].
    #[serde(default = "application_name")]
    pub param: Param,
    /// A value starting with this (case-sensitive, not empty) is Premium
    /// [default: premium].
    #[serde(default = "premium")]
    pub premium_prefix: String,
    /// The class of every other session.
    #[serde(default = "freemium")]
    pub default: Class,
}

fn freemium() -> Class {
    Class::F
}

fn application_name() -> Param {
    Param::ApplicationName
}

fn premium() -> String {
    "premium".into()
}

impl Default for ClassRule {
    fn default() -> ClassRule {
        ClassRule { param: application_name(), premium_prefix: premium(), default: freemium() }
    }
}

impl ClassRule {
    /// The class of the session that sent `startup`.
    pub fn classify(&self, startup: &Startup) -> Class {
        self.class_of(startup).unwrap_or(self.default)
    }

    /// The class `startup` names, or `None` when it does not carry the
    /// rule's parameter (only `application_name` can be missing: a user is
    /// always sent, and a missing database is the user's name).
    pub fn class_of(&self, startup: &Startup) -> Option<Class> {
        let value = match self.param {
            Param::Database => startup.param("database").or_else(|| startup.param("user")),
            p => startup.param(p.name()),
        };
        value.filter(|v| !v.is_empty()).map(|v| self.class_of_value(v))
    }

    /// The class of a session whose parameter has `value`.
    pub fn class_of_value(&self, value: &str) -> Class {
        if !self.premium_prefix.is_empty() && value.starts_with(&self.premium_prefix) {
            Class::P
        } else {
            self.default
        }
    }

    /// Whether the rule reads `application_name`, which a client may also
    /// set with `SET application_name` after its login.
    pub fn reads_application_name(&self) -> bool {
        self.param == Param::ApplicationName
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(params: &[(&str, &str)]) -> Startup {
        Startup::Start { minor: 0, params: params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() }
    }

    fn rule(text: &str) -> Result<ClassRule, String> {
        crate::core::workload::from_toml(text)
    }

    #[test]
    fn the_prefix_decides_and_everything_else_gets_the_default() {
        let r = rule("param = \"application_name\"\npremium_prefix = \"premium\"").unwrap();
        assert_eq!(r.default, Class::F);
        assert_eq!(r.classify(&start(&[("user", "u"), ("application_name", "premium-web")])), Class::P);
        assert_eq!(r.classify(&start(&[("user", "u"), ("application_name", "free-web")])), Class::F);
        assert_eq!(r.classify(&start(&[("user", "premium")])), Class::F, "another parameter does not count");
        let by_db = rule("param = \"database\"\npremium_prefix = \"gold\"\ndefault = \"F\"").unwrap();
        assert_eq!(by_db.classify(&start(&[("user", "gold_app")])), Class::P, "no database: the user's name");
        assert_eq!(by_db.classify(&start(&[("user", "gold_app"), ("database", "shared")])), Class::F);
        let empty = rule("param = \"user\"\npremium_prefix = \"\"\ndefault = \"P\"").unwrap();
        assert_eq!(empty.classify(&start(&[("user", "x")])), Class::P, "an empty prefix matches nothing");
    }

    #[test]
    fn an_empty_rule_is_the_documented_default() {
        let r = rule("").unwrap();
        assert_eq!(r, ClassRule::default());
        assert_eq!((r.param, r.premium_prefix.as_str(), r.default), (Param::ApplicationName, "premium", Class::F));
        assert_eq!(r.classify(&start(&[("user", "u"), ("application_name", "premium-web")])), Class::P);
        assert_eq!(r.classify(&start(&[("user", "premium")])), Class::F);
        assert_eq!(r.class_of(&start(&[("user", "u")])), None, "no application_name: the class comes later");
        assert_eq!(r.class_of(&start(&[("user", "u"), ("application_name", "")])), None);
        assert_eq!((r.class_of_value("premium-web"), r.class_of_value("web")), (Class::P, Class::F));
        assert!(r.reads_application_name());
    }

    #[test]
    fn a_bad_rule_is_refused_naming_the_field() {
        let e = rule("param = \"host\"\npremium_prefix = \"p\"").unwrap_err();
        assert!(e.contains("param") && e.contains("host"), "{e}");
        let e = rule("param = \"user\"\npremium_prefix = \"p\"\nprefix = \"q\"").unwrap_err();
        assert!(e.contains("prefix"), "{e}");
    }
}
