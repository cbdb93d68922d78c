import Foundation
import Testing

@testable import PostgresStores

@Suite struct MigrationsTests {
    /// `schemas/migrations/` of this checkout.
    static let directory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("schemas/migrations")

    @Test func embeddedMigrationsAreTheFilesInSchemas() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.directory.path)
            .filter { $0.hasSuffix(".sql") }
            .sorted()
        #expect(
            Migrations.all.map(\.file) == files,
            "Migrations+SQL.swift is out of date with schemas/migrations: run scripts/generate-migrations.sh"
        )
        for migration in Migrations.all where files.contains(migration.file) {
            let text = try String(contentsOf: Self.directory.appendingPathComponent(migration.file), encoding: .utf8)
            #expect(
                migration.sql == text,
                "\(migration.file) differs from Migrations+SQL.swift: run scripts/generate-migrations.sh"
            )
            let stem = migration.file.dropLast(".sql".count)
            #expect(Int(stem.prefix(4)) == migration.version)
            #expect(stem.dropFirst(5).replacingOccurrences(of: "_", with: " ") == migration.name)
        }
    }

    @Test func versionsCountUpFromOne() {
        #expect(Migrations.all.map(\.version) == Array(1...Migrations.all.count))
        #expect(Migrations.all.allSatisfy { !$0.statements.isEmpty })
    }

    /// Released migrations never change: databases migrated by earlier builds recorded these
    /// versions and will not run them again, so a fresh database must get the same schema.
    @Test func releasedMigrationsRunTheirOriginalStatements() throws {
        let released = [
            1: [
                """
                CREATE TABLE IF NOT EXISTS push.device_tokens (
                    topic text NOT NULL,
                    token text NOT NULL,
                    user_id text NOT NULL,
                    environment text NOT NULL CHECK (environment IN ('production', 'sandbox')),
                    registered_at timestamptz NOT NULL,
                    updated_at timestamptz NOT NULL,
                    unregistered_at timestamptz NULL,
                    PRIMARY KEY (topic, token)
                )
                """,
                """
                CREATE INDEX IF NOT EXISTS device_tokens_active_by_user
                    ON push.device_tokens (topic, user_id) WHERE unregistered_at IS NULL
                """,
            ],
            2: [
                """
                CREATE TABLE IF NOT EXISTS push.deliveries (
                    event_id text NOT NULL,
                    token text NOT NULL,
                    topic text NOT NULL,
                    user_id text NOT NULL,
                    result text NOT NULL,
                    unregistered_event text NULL,
                    recorded_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (event_id, token)
                )
                """,
                "CREATE INDEX IF NOT EXISTS deliveries_recorded_at ON push.deliveries (recorded_at)",
            ],
        ]
        let names = [1: "device tokens", 2: "delivery ledger"]
        for (version, statements) in released {
            let migration = try #require(Migrations.all.first { $0.version == version })
            #expect(migration.statements == statements)
            #expect(migration.name == names[version])
        }
    }
}

@Suite struct SQLScriptTests {
    @Test func splitsOnSemicolonsAndDropsComments() {
        let script = """
            -- a header comment; with a semicolon
            CREATE TABLE a (x int);  -- trailing; comment
            /* block; /* nested; */ still comment; */
            INSERT INTO a VALUES (1)
            ;

            ;
            SELECT 2
            """
        #expect(SQLScript.statements(script) == ["CREATE TABLE a (x int)", "INSERT INTO a VALUES (1)", "SELECT 2"])
    }

    @Test func keepsSemicolonsInsideQuotes() {
        let script = """
            SELECT 'a;b', 'it''s; fine', E'esc\\';aped', "odd;name" FROM t;
            CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql;
            CREATE FUNCTION g() RETURNS int AS $body$ SELECT '$$;'; $body$ LANGUAGE sql;
            SELECT $1::int; SELECT 'x' -- don't; split
            """
        #expect(
            SQLScript.statements(script) == [
                #"SELECT 'a;b', 'it''s; fine', E'esc\';aped', "odd;name" FROM t"#,
                "CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql",
                "CREATE FUNCTION g() RETURNS int AS $body$ SELECT '$$;'; $body$ LANGUAGE sql",
                "SELECT $1::int",
                "SELECT 'x'",
            ]
        )
    }

    @Test func apostrophesInCommentsDoNotOpenStrings() {
        #expect(SQLScript.statements("-- APNs' answer\nSELECT 1;\nSELECT 2;") == ["SELECT 1", "SELECT 2"])
    }
}
