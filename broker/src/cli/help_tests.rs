//! The help every command prints: every flag and argument has a line, the global flags stand
//! under their own heading, the main commands show examples, and the event filter names every
//! kind the functions log.

use clap::CommandFactory;

use super::Cli;

/// `(command path, flag)` for every argument of every command without a help line.
fn undocumented(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if id == "help" || id == "version" {
            continue;
        }
        if arg.get_help().is_none() && arg.get_long_help().is_none() {
            out.push(format!("{path} {id}"));
        }
    }
    for sub in cmd.get_subcommands() {
        if sub.get_about().is_none() {
            out.push(format!("{path} {} (the command itself)", sub.get_name()));
        }
        undocumented(sub, &format!("{path} {}", sub.get_name()), out);
    }
}

#[test]
fn every_flag_and_argument_of_every_command_has_a_help_line() {
    let mut cmd = Cli::command();
    cmd.build();
    let mut missing = Vec::new();
    undocumented(&cmd, "hero", &mut missing);
    assert!(missing.is_empty(), "without help: {missing:#?}");
}

#[test]
fn the_global_flags_stand_under_their_own_heading() {
    let mut cmd = Cli::command();
    cmd.build();
    let submit = cmd.find_subcommand_mut("submit").expect("submit");
    let help = submit.render_long_help().to_string();
    let (own, global) = help
        .split_once("Global options")
        .expect("a Global options heading in `hero submit --help`");
    assert!(
        own.contains("--priority") && !own.contains("--redis-url"),
        "{help}"
    );
    assert!(
        global.contains("--redis-url") && global.contains("--tls-ca"),
        "{help}"
    );
    assert!(
        help.contains("Examples:"),
        "the long help shows examples: {help}"
    );
}

#[test]
fn the_event_filter_names_every_kind() {
    let mut cmd = Cli::command();
    cmd.build();
    let events = cmd.find_subcommand_mut("events").expect("events");
    let help = events.render_long_help().to_string();
    for k in hero_protocol::EventKind::ALL {
        assert!(
            help.contains(k.as_str()),
            "--event's help lacks {k}: {help}"
        );
    }
}
