use super::*;

fn hash_of(secret: &str) -> String {
    TokenHash::of(secret).to_string()
}

#[test]
fn a_file_names_principals_by_the_hashes_of_their_secrets() {
    let text = format!(
        "# who may do what\n\
         indexer {} write:logs-* read:logs-*\n\
         \n\
         operations   {}   operate:*\n\
         root {} admin\n",
        hash_of("mend_indexer"),
        hash_of("mend_ops"),
        hash_of("mend_root")
    );
    let tokens = Tokens::parse(&text).unwrap();
    assert_eq!(tokens.len(), 3);
    assert!(!tokens.is_empty());
    let names: Vec<&str> = tokens.principals().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["indexer", "operations", "root"],
        "in the file's order"
    );
    let only_comments = Tokens::parse("# nobody yet\n\n").unwrap();
    assert!(only_comments.is_empty());
    assert_eq!(only_comments.principals().count(), 0);
    let indexer = tokens.authenticate("mend_indexer").unwrap();
    assert_eq!(indexer.name, "indexer");
    assert!(indexer.may(Action::Write, Some("logs-2026")));
    assert!(indexer.may(Action::Read, Some("logs-2026")));
    assert!(!indexer.may(Action::Write, Some("metrics")));
    assert!(!indexer.may(Action::Operate, Some("logs-2026")));
    assert!(!indexer.may(Action::Admin, None));
    let operations = tokens.authenticate("mend_ops").unwrap();
    assert!(operations.may(Action::Operate, Some("anything")));
    assert!(!operations.may(Action::Read, Some("anything")));
    let root = tokens.authenticate("mend_root").unwrap();
    assert!(root.is_admin());
    assert!(root.may(Action::Write, Some("metrics")));
    assert!(root.may(Action::Admin, None));
    assert_eq!(tokens.authenticate("mend_nobody"), None);
    assert_eq!(tokens.authenticate(""), None);
}

#[test]
fn patterns_are_exact_ids_prefixes_or_everything() {
    let exact = Pattern::parse("logs").unwrap();
    assert!(exact.matches("logs") && !exact.matches("logs-1") && !exact.matches("log"));
    let prefix = Pattern::parse("logs-*").unwrap();
    assert!(prefix.matches("logs-1") && prefix.matches("logs-") && !prefix.matches("logs"));
    let every = Pattern::parse("*").unwrap();
    assert!(every.matches("logs") && every.matches("x"));
    for bad in [
        "",
        "l*gs",
        "**",
        "-logs",
        "logs/x",
        "lögs*",
        &"a".repeat(129),
    ] {
        assert!(Pattern::parse(bad).is_err(), "{bad:?} accepted");
    }
    assert_eq!(Pattern::parse("logs-*").unwrap().to_string(), "logs-*");
}

#[test]
fn grants_read_back_as_written() {
    for text in ["admin", "read:*", "write:logs-*", "operate:metrics"] {
        assert_eq!(Grant::parse(text).unwrap().to_string(), text);
    }
    for bad in [
        "",
        "root",
        "delete:*",
        "read",
        "read:",
        "write:a b",
        "admin:*",
    ] {
        assert!(Grant::parse(bad).is_err(), "{bad:?} accepted");
    }
    // An action on no dataset (listing the datasets) is allowed by any grant of it.
    assert!(
        Grant::parse("read:logs-*")
            .unwrap()
            .allows(Action::Read, None)
    );
    assert!(
        !Grant::parse("read:logs-*")
            .unwrap()
            .allows(Action::Write, None)
    );
}

#[test]
fn a_file_that_breaks_a_rule_is_refused_whole_with_its_line() {
    let good = hash_of("mend_a");
    let other = hash_of("mend_b");
    let cases = [
        (format!("a {good}\n"), 1, "no grants"),
        ("a mend_a read:*\n".to_string(), 1, "never secrets"),
        ("a sha256:abc read:*\n".to_string(), 1, "64 hex digits"),
        (
            format!("a sha256:{} read:*\n", "zz".repeat(32)),
            1,
            "hex digits",
        ),
        (
            format!("a {good} read:*\nb {good} read:*\n"),
            2,
            "credential of line 1",
        ),
        (
            format!("a {good} read:*\na {good} read:*\n"),
            2,
            "credential of line 1",
        ),
        (
            "a cert:x.example read:*\nb cert:X.example read:*\n".to_string(),
            2,
            "credential of line 1",
        ),
        ("a cert:not_a_name! read:*\n".to_string(), 1, "DNS name"),
        (
            "a cert:*.example read:*\n".to_string(),
            1,
            "without wildcards",
        ),
        (format!("anonymous {good} read:*\n"), 1, "server's own"),
        (format!("admin-token {good} admin\n"), 1, "server's own"),
        (format!("cli {good} read:*\n"), 1, "server's own"),
        (
            format!("supervisor@r1 {good} read:*\n"),
            1,
            "principal name",
        ),
        (
            format!("a {good} read:*\na {other} write:*\n"),
            2,
            "line 1 with other grants",
        ),
        (format!("# c\n-a {good} read:*\n"), 2, "principal name"),
        (format!("a {good} read:* delete:*\n"), 1, "unknown"),
        (format!("a {good} read:x*y\n"), 1, "may only come last"),
        ("lonely\n".to_string(), 1, "expected a principal"),
    ];
    for (text, line, says) in cases {
        let error = Tokens::parse(&text).unwrap_err();
        assert_eq!(error.line, line, "{text:?}: {error}");
        assert!(error.to_string().contains(says), "{text:?}: {error}");
    }
    // A secret pasted where a name, a certificate name or a grant goes is refused
    // without being repeated: the message says the line and the rule, nothing of its
    // text.
    let secret = new_secret().unwrap();
    let pasted = [
        format!("{secret} {good} read:*\n"),
        format!("a cert:{secret} read:*\n"),
        format!("a {good} {secret}\n"),
        format!("a {good} read:{secret}x*y\n"),
        format!("a {good} {secret}:*\n"),
        format!("cli {good} read:* # {secret}\n"),
        format!("a {good} read:*\na {other} write:* {secret}:x\n"),
    ];
    for text in &pasted {
        let error = Tokens::parse(text).unwrap_err().to_string();
        assert!(!error.contains(&secret), "{error}");
        assert!(!error.contains(&secret[..12]), "{error}");
    }
    println!(
        "tokens file: {} pasted secrets refused unrepeated",
        pasted.len()
    );
    let too_many_grants = format!("a {good} {}\n", vec!["read:*"; MAX_GRANTS + 1].join(" "));
    assert!(Tokens::parse(&too_many_grants).is_err());
    let too_big = "#".repeat(MAX_TOKENS_FILE_BYTES + 1);
    assert_eq!(Tokens::parse(&too_big).unwrap_err().line, 0);
}

/// Every limit of a tokens file admits its edge and refuses one more: a pattern as long
/// as a dataset id, a principal's grants, a principal name, a certificate's DNS name, the
/// principals of one file and the file's bytes.
#[test]
fn every_limit_of_a_tokens_file_admits_its_edge_and_refuses_one_more() {
    let good = hash_of("mend_a");
    let id = "a".repeat(MAX_ID_BYTES);
    assert_eq!(Pattern::parse(&id).unwrap(), Pattern::Exact(id.clone()));
    assert_eq!(
        Pattern::parse(&format!("{id}*")).unwrap(),
        Pattern::Prefix(id.clone())
    );
    assert!(Pattern::parse(&format!("{id}a*")).is_err());

    let grants = |n: usize| vec!["read:*"; n].join(" ");
    let at_most = format!("a {good} {}\n", grants(MAX_GRANTS));
    assert_eq!(Tokens::parse(&at_most).unwrap().len(), 1);
    let one_more = format!("a {good} {}\n", grants(MAX_GRANTS + 1));
    assert!(
        Tokens::parse(&one_more)
            .unwrap_err()
            .to_string()
            .contains("grants")
    );

    let name = "n".repeat(MAX_PRINCIPAL_NAME);
    assert!(check_principal_name(&name).is_ok());
    assert!(check_principal_name(&format!("{name}n")).is_err());
    assert!(check_principal_name("").is_err());

    // 253 characters: four labels of 63 and the dots between them, less two.
    let label = "c".repeat(63);
    let longest = format!("{label}.{label}.{label}.{}", "c".repeat(61));
    assert_eq!(longest.len(), 253);
    assert_eq!(
        Credential::parse(&format!("cert:{longest}")).unwrap(),
        Credential::Certificate(longest.clone())
    );
    assert!(Credential::parse(&format!("cert:{longest}c")).is_err());
    assert!(Credential::parse("cert:").is_err());
    // A hash shows as what it is (the hash of a secret, never the secret).
    let hash = TokenHash::of("mend_a");
    assert_eq!(format!("{hash:?}"), format!("TokenHash({good})"));

    let file = |n: usize| -> String {
        (0..n)
            .map(|i| format!("p{i} {} read:*\n", hash_of(&format!("mend_{i}"))))
            .collect()
    };
    let full = file(MAX_PRINCIPALS + 1);
    let error = Tokens::parse(&full).unwrap_err();
    assert_eq!(error.line, MAX_PRINCIPALS + 1, "{error}");

    // A file of exactly the most bytes read, padded with a comment.
    let mut exact = format!("a {good} read:*\n#");
    exact.push_str(&"#".repeat(MAX_TOKENS_FILE_BYTES - exact.len()));
    assert_eq!(exact.len(), MAX_TOKENS_FILE_BYTES);
    assert_eq!(Tokens::parse(&exact).unwrap().len(), 1);
    // Read from a file, as a server reads it: the same edge.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    std::fs::write(&path, &exact).unwrap();
    assert_eq!(TokensFile::open(&path).unwrap().current().len(), 1);
    exact.push('#');
    assert_eq!(Tokens::parse(&exact).unwrap_err().line, 0);
    std::fs::write(&path, &exact).unwrap();
    assert!(
        TokensFile::open(&path)
            .unwrap_err()
            .to_string()
            .contains("larger than")
    );
}

/// In a file of the most principals there may be, every secret finds its own principal
/// and no other, and an unknown one finds none; each is compared with the principals whose
/// hash starts as its own does, here only its own (10,000 distinct 8-byte prefixes).
#[test]
fn every_secret_of_a_full_file_finds_its_own_principal() {
    let secret = |n: usize| format!("mend_{n:064x}");
    let read = Grant::parse("read:*").unwrap();
    let text: String = (0..MAX_PRINCIPALS)
        .map(|n| tokens_file_line(&format!("p{n}"), &secret(n), std::slice::from_ref(&read)) + "\n")
        .collect();
    let tokens = Tokens::parse(&text).unwrap();
    assert_eq!(tokens.len(), MAX_PRINCIPALS);
    assert_eq!(tokens.by_hash_prefix.len(), MAX_PRINCIPALS);
    assert!(tokens.by_hash_prefix.values().all(|found| found.len() == 1));
    let started = std::time::Instant::now();
    for n in 0..MAX_PRINCIPALS {
        let principal = tokens.authenticate(&secret(n)).expect("its principal");
        assert_eq!(principal.name, format!("p{n}"));
    }
    let elapsed = started.elapsed();
    assert_eq!(tokens.authenticate(&secret(MAX_PRINCIPALS)), None);
    println!(
        "auth: {MAX_PRINCIPALS} secrets each found their principal among {MAX_PRINCIPALS}, \
         {:.1} µs each (unoptimized build)",
        elapsed.as_secs_f64() * 1e6 / MAX_PRINCIPALS as f64
    );
}

/// A client certificate is the principal of the first `cert:NAME` line whose name it
/// holds; one holding no listed name is no one's, and never a token's principal.
/// A rotation: one principal with two credential lines is one principal, and each
/// credential is it; removing the old line leaves the new one.
#[test]
fn a_principal_may_hold_two_credentials_at_once_for_a_rotation() {
    let both = format!(
        "writer {} write:logs read:logs\nother {} read:*\nwriter {} write:logs read:logs\n\
         writer cert:w.example write:logs read:logs\n",
        hash_of("mend_old"),
        hash_of("mend_other"),
        hash_of("mend_new")
    );
    let tokens = Tokens::parse(&both).unwrap();
    assert_eq!(tokens.len(), 2);
    let names: Vec<&str> = tokens.principals().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["writer", "other"]);
    assert_eq!(tokens.authenticate("mend_old").unwrap().name, "writer");
    assert_eq!(tokens.authenticate("mend_new").unwrap().name, "writer");
    assert_eq!(tokens.authenticate("mend_other").unwrap().name, "other");
    let after = format!("writer {} write:logs read:logs\n", hash_of("mend_new"));
    let tokens = Tokens::parse(&after).unwrap();
    assert_eq!(tokens.authenticate("mend_old"), None);
    assert_eq!(tokens.authenticate("mend_new").unwrap().name, "writer");
}

#[test]
fn a_secret_is_strong_enough_only_with_128_bits_and_8_distinct_characters() {
    let strength = SecretStrength::of;
    assert_eq!(strength("qz").bits, 9);
    assert!(!strength("qz").is_enough());
    assert!(!strength("").is_enough());
    let made = new_secret().unwrap();
    assert_eq!(strength(&made).bits, 420, "{made}");
    assert!(strength(&made).is_enough());
    // Letters and digits count log2(36) bits each: 25 are 129 bits, 24 are 124.
    assert_eq!(strength("0123456789abcdef012345678").bits, 129);
    assert!(strength("0123456789abcdef012345678").is_enough());
    assert!(!strength("0123456789abcdef01234567").is_enough());
    // Length without variety is not strength.
    assert!(!strength(&"qz".repeat(40)).is_enough());
    assert_eq!(strength(&"abcdefg".repeat(10)).distinct_characters, 7);
    assert!(!strength(&"abcdefg".repeat(10)).is_enough());
    assert!(strength(&"abcdefgh".repeat(10)).is_enough());
}

/// The comparison refuses every strict prefix and every extension of a secret, and every
/// one-byte change, and admits the secret itself.
#[test]
fn the_constant_time_comparison_refuses_every_prefix_extension_and_change() {
    let secret = new_secret().unwrap();
    let secret = secret.as_bytes();
    assert!(constant_time_eq(secret, secret));
    let mut refused = 0;
    for end in 0..secret.len() {
        assert!(!constant_time_eq(&secret[..end], secret), "prefix of {end}");
        assert!(!constant_time_eq(secret, &secret[..end]), "prefix of {end}");
        refused += 2;
    }
    for extra in [b"0".as_slice(), b"\0", b"mend_"] {
        let longer = [secret, extra].concat();
        assert!(!constant_time_eq(&longer, secret));
        assert!(!constant_time_eq(secret, &longer));
        refused += 2;
    }
    for at in 0..secret.len() {
        let mut changed = secret.to_vec();
        changed[at] ^= 1;
        assert!(!constant_time_eq(&changed, secret), "byte {at} changed");
        refused += 1;
    }
    println!("constant_time_eq: refused {refused} near misses of one secret");
    assert_eq!(refused, 2 * secret.len() + 6 + secret.len());
}

#[test]
fn a_client_certificate_is_the_principal_of_a_name_it_holds() {
    let certificate = |names: &[&str]| {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(ToString::to_string).collect();
        rcgen::CertificateParams::new(names)
            .unwrap()
            .self_signed(&key)
            .unwrap()
            .der()
            .clone()
    };
    let text = format!(
        "ingest cert:ingest-1.example.internal write:logs-*\n\
         first cert:B.Example read:*\n\
         second cert:a.example admin\n\
         token-holder {} read:*\n",
        hash_of("mend_t")
    );
    let tokens = Tokens::parse(&text).unwrap();
    let name_of = |names: &[&str]| {
        tokens
            .authenticate_certificate(&certificate(names))
            .map(|principal| principal.name.clone())
    };
    assert_eq!(
        name_of(&["ingest-1.example.internal"]).as_deref(),
        Some("ingest")
    );
    // Names compare without case; of a certificate with several listed names, the first
    // line that matches is its principal.
    assert_eq!(
        name_of(&["a.example", "b.example"]).as_deref(),
        Some("first")
    );
    assert_eq!(name_of(&["a.example"]).as_deref(), Some("second"));
    assert_eq!(name_of(&["elsewhere.example"]), None);
    // A wildcard name is no principal's, though TLS takes it as valid for each name it
    // covers; beside an exact listed name, the exact name counts.
    assert_eq!(name_of(&["*.example.internal"]), None);
    assert_eq!(name_of(&["*.example"]), None);
    assert_eq!(
        name_of(&["*.example", "ingest-1.example.internal"]).as_deref(),
        Some("ingest")
    );
    assert_eq!(name_of(&["ingest-2.example.internal"]), None);
    // A certificate line is never a bearer secret.
    assert_eq!(tokens.authenticate("cert:ingest-1.example.internal"), None);
}

#[test]
fn a_tokens_file_is_read_again_when_it_changes_and_a_bad_change_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    assert_eq!(
        TokensFile::open(&path).unwrap_err().line,
        0,
        "no file, no server"
    );
    std::fs::write(&path, format!("a {} read:*\n", hash_of("mend_a"))).unwrap();
    let file = TokensFile::open(&path).unwrap();
    assert!(file.current().authenticate("mend_a").is_some());
    assert_eq!(file.reload(), Reload::Unchanged);

    std::fs::write(
        &path,
        format!(
            "a {} read:*\nb {} write:logs\n",
            hash_of("mend_a"),
            hash_of("mend_b")
        ),
    )
    .unwrap();
    assert_eq!(file.reload(), Reload::Reloaded { principals: 2 });
    assert_eq!(file.current().authenticate("mend_b").unwrap().name, "b");

    // A change that breaks a rule: refused whole, the principals before stay.
    std::fs::write(
        &path,
        format!("a {} read:*\nb mend_b admin\n", hash_of("mend_a")),
    )
    .unwrap();
    match file.reload() {
        Reload::Refused { error } => assert_eq!(error.line, 2, "{error}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(file.current().authenticate("mend_b").unwrap().name, "b");
    // A file removed: refused too, the principals before stay.
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(file.reload(), Reload::Refused { .. }));
    assert_eq!(file.current().len(), 2);
    // A file too large is refused before it is read whole.
    std::fs::write(&path, vec![b'#'; MAX_TOKENS_FILE_BYTES + 1]).unwrap();
    assert!(matches!(file.reload(), Reload::Refused { .. }));
    assert_eq!(file.current().len(), 2);
}

#[test]
fn a_new_secret_is_long_random_and_its_line_authenticates_it() {
    let (first, second) = (new_secret().unwrap(), new_secret().unwrap());
    assert_ne!(first, second);
    assert!(first.starts_with(SECRET_PREFIX));
    assert_eq!(first.len(), SECRET_PREFIX.len() + 64);
    let grants = [
        Grant::parse("write:logs-*").unwrap(),
        Grant::parse("read:logs-*").unwrap(),
    ];
    let line = tokens_file_line("indexer", &first, &grants);
    assert!(
        !line.contains(&first),
        "the line holds the hash, never the secret"
    );
    let tokens = Tokens::parse(&line).unwrap();
    let principal = tokens.authenticate(&first).unwrap();
    assert_eq!(principal.name, "indexer");
    assert_eq!(principal.grants, grants);
    assert_eq!(tokens.authenticate(&second), None);
}
