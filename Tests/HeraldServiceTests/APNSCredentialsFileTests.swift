import APNSHTTP2
import Crypto
import Foundation
import HeraldService
import PushPipeline
import Testing

@Suite struct APNSCredentialsFileTests {
    /// A fresh directory with a `.p8` key, a PKCS#12 stand-in and PEM files, removed by `body`'s end.
    static func withFiles(_ body: (URL) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("credentials-file-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("keys"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let key = P256.Signing.PrivateKey()
        try key.pemRepresentation.write(to: directory.appendingPathComponent("keys/AuthKey.p8"), atomically: true, encoding: .utf8)
        // DER bytes (0x30 = SEQUENCE), as a .p12 starts; the loader does not open it.
        try Data([0x30, 0x82, 0x01, 0x00]).write(to: directory.appendingPathComponent("other.p12"))
        let pemCertificate = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
        try pemCertificate.write(to: directory.appendingPathComponent("third.pem"), atomically: true, encoding: .utf8)
        try key.pemRepresentation.write(to: directory.appendingPathComponent("third-key.pem"), atomically: true, encoding: .utf8)
        try (pemCertificate + key.pemRepresentation).write(
            to: directory.appendingPathComponent("combined.pem"),
            atomically: true,
            encoding: .utf8
        )
        try await body(directory)
    }

    static func write(_ json: String, in directory: URL) throws -> String {
        let path = directory.appendingPathComponent("credentials.json").path
        try json.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func everyKindOfEntryIsReadWithPathsRelativeToTheFile() async throws {
        try await Self.withFiles { directory in
            let path = try Self.write(
                """
                [
                  {"topics": ["com.example.shop", "com.example.shop.watch"],
                   "key_path": "keys/AuthKey.p8", "key_id": "ABC123DEFG", "team_id": "TEAM123456"},
                  {"topics": ["com.other.app"], "cert_path": "other.p12", "cert_password": "s3cret"},
                  {"topics": ["com.third.app"], "cert_path": "third.pem", "cert_key_path": "third-key.pem"},
                  {"topics": ["com.fourth.app"], "cert_path": "\(directory.path)/combined.pem"}
                ]
                """,
                in: directory
            )
            let credentials = try CredentialsFile.load(path: path)
            #expect(
                credentials.keys.sorted() == [
                    "com.example.shop", "com.example.shop.watch", "com.fourth.app", "com.other.app", "com.third.app",
                ])
            #expect(credentials["com.example.shop"]?.description == "token(keyID: ABC123DEFG, teamID: TEAM123456)")
            #expect(credentials["com.example.shop.watch"]?.usesProviderTokens == true)
            #expect(credentials["com.other.app"]?.description == "certificate(pkcs12)")
            #expect(credentials["com.third.app"]?.description == "certificate(pem)")
            #expect(credentials["com.fourth.app"]?.description == "certificate(pem)")
        }
    }

    @Test func theFileAloneConfiguresHeraldForItsAppsAndBesideADefaultCredentialForItsAppsOnly() async throws {
        try await Self.withFiles { directory in
            let path = try Self.write(
                """
                [{"topics": ["com.example.shop"], "key_path": "keys/AuthKey.p8", "key_id": "ABC123DEFG", "team_id": "TEAM123456"},
                 {"topics": ["com.other.app"], "cert_path": "other.p12"}]
                """,
                in: directory
            )
            let alone = try await HeraldConfiguration(environment: ["HERALD_CREDENTIALS_FILE": path])
            #expect(alone.apns?.credentialsByTopic.keys.sorted() == ["com.example.shop", "com.other.app"])
            #expect(alone.apns?.authentication == nil, "other topics are rejected")

            let withDefault = try await HeraldConfiguration(environment: [
                "HERALD_CREDENTIALS_FILE": path,
                "HERALD_APNS_KEY_PATH": directory.appendingPathComponent("keys/AuthKey.p8").path,
                "HERALD_APNS_KEY_ID": "DEF456GHIJ",
                "HERALD_APNS_TEAM_ID": "TEAM654321",
            ])
            #expect(withDefault.apns?.authentication?.description == "token(keyID: DEF456GHIJ, teamID: TEAM654321)")
            #expect(withDefault.apns?.credentialsByTopic.count == 2)

            #expect(try await HeraldConfiguration(environment: [:]).apns == nil, "no credential at all")
        }
    }

    /// The file's keys before it served FCM too keep working; both names set to different files
    /// is refused rather than one silently chosen.
    @Test func theCredentialsFileKeysFormerNamesStillWork() async throws {
        try await Self.withFiles { directory in
            let path = try Self.write(
                #"[{"topics": ["com.example.shop"], "key_path": "keys/AuthKey.p8", "key_id": "ABC123DEFG", "team_id": "TEAM123456"}]"#,
                in: directory
            )
            let former = try await HeraldConfiguration(environment: [
                "HERALD_APNS_CREDENTIALS_FILE": path, "HERALD_APNS_CREDENTIALS_CHECK_S": "3",
            ])
            #expect(former.credentialsFile == path)
            #expect(former.credentialsCheckInterval == .seconds(3))
            #expect(former.apns?.credentialsByTopic.keys.sorted() == ["com.example.shop"])
            let both = try await HeraldConfiguration(environment: [
                "HERALD_CREDENTIALS_FILE": path, "HERALD_APNS_CREDENTIALS_FILE": path,
                "HERALD_CREDENTIALS_CHECK_S": "4", "HERALD_APNS_CREDENTIALS_CHECK_S": "3",
            ])
            #expect(both.credentialsCheckInterval == .seconds(4), "the current name wins")
            await #expect(throws: ConfigurationError.self) {
                _ = try await HeraldConfiguration(environment: [
                    "HERALD_CREDENTIALS_FILE": path, "HERALD_APNS_CREDENTIALS_FILE": path + ".other",
                ])
            }
        }
    }

    @Test func theEnvironmentsCertificateMayBePEMAndItsKeyIDsMustHaveApplesForm() async throws {
        try await Self.withFiles { directory in
            let pem = try await HeraldConfiguration(environment: [
                "HERALD_APNS_CERT_PATH": directory.appendingPathComponent("third.pem").path,
                "HERALD_APNS_CERT_KEY_PATH": directory.appendingPathComponent("third-key.pem").path,
            ])
            #expect(pem.apns?.authentication?.description == "certificate(pem)")
            let combined = try await HeraldConfiguration(environment: ["HERALD_APNS_CERT_PATH": directory.appendingPathComponent("combined.pem").path])
            #expect(combined.apns?.authentication?.description == "certificate(pem)")
            let pkcs12 = try await HeraldConfiguration(environment: ["HERALD_APNS_CERT_PATH": directory.appendingPathComponent("other.p12").path])
            #expect(pkcs12.apns?.authentication?.description == "certificate(pkcs12)")
            await #expect {
                _ = try await HeraldConfiguration(environment: [
                    "HERALD_APNS_KEY_PATH": directory.appendingPathComponent("keys/AuthKey.p8").path,
                    "HERALD_APNS_KEY_ID": "ABC123DEF\"}", "HERALD_APNS_TEAM_ID": "TEAM123456",
                ])
            } throws: { error in
                "\(error)".contains("HERALD_APNS_KEY_ID=") && "\(error)".contains("must be Apple's 10-character ID")
            }
        }
    }

    @Test func anEmptyListIsAllowed() async throws {
        try await Self.withFiles { directory in
            let credentials = try CredentialsFile.load(path: Self.write("[]", in: directory))
            #expect(credentials.isEmpty)
        }
    }

    @Test(arguments: [
        (#"{"topics": ["a"]}"#, "must be a JSON array"),
        (#"[{"key_path": "keys/AuthKey.p8", "key_id": "K", "team_id": "T"}]"#, "entry 1: \"topics\" must list"),
        (#"[{"topics": [], "cert_path": "other.p12"}]"#, "entry 1: \"topics\" must list"),
        (#"[{"topics": ["a"]}]"#, "give key_path (token) or cert_path"),
        (#"[{"topics": ["a"], "key_path": "keys/AuthKey.p8", "cert_path": "other.p12"}]"#, "not both"),
        (#"[{"topics": ["a"], "key_path": "keys/AuthKey.p8", "key_id": "K"}]"#, "needs key_id and team_id"),
        (#"[{"topics": ["a"], "key_path": "missing.p8", "key_id": "K", "team_id": "T"}]"#, "cannot read HERALD_CREDENTIALS_FILE"),
        (#"[{"topics": ["a"], "key_path": "third.pem", "key_id": "K", "team_id": "T"}]"#, "is not a PKCS#8"),
        (#"[{"topics": ["a"], "cert_path": "missing.p12"}]"#, "entry 1: cert_path="),
        (#"[{"topics": ["a"], "key_path": "keys/AuthKey.p8", "key_id": "K", "team_id": "TEAM123456"}]"#, "entry 1: key_id=K must be Apple's 10-character ID"),
        (#"[{"topics": ["a"], "key_path": "keys/AuthKey.p8", "key_id": "ABC123DEFG", "team_id": "team123456"}]"#, "entry 1: team_id=team123456 must be"),
        (#"[{"topics": ["a"], "cert_path": "other.p12", "key_id": "K"}]"#, "takes no key_id"),
        (#"[{"topics": [""], "cert_path": "other.p12"}]"#, "must be 1 to 255 bytes"),
        (
            #"[{"topics": ["a"], "cert_path": "other.p12"}, {"topics": ["a"], "cert_path": "other.p12"}]"#,
            "entry 2: the topic a is listed twice"
        ),
    ])
    func mistakesAreNamed(json: String, expected: String) async throws {
        try await Self.withFiles { directory in
            let path = try Self.write(json, in: directory)
            #expect {
                _ = try CredentialsFile.load(path: path)
            } throws: { error in
                "\(error)".contains(expected) && "\(error)".contains("HERALD_CREDENTIALS_FILE")
            }
        }
    }

    @Test func passwordsNeverAppearInErrors() async throws {
        try await Self.withFiles { directory in
            let path = try Self.write(
                #"[{"topics": ["a"], "cert_path": "other.p12", "cert_password": "hunter2", "key_id": "K"}]"#,
                in: directory
            )
            #expect { _ = try CredentialsFile.load(path: path) } throws: { !"\($0)".contains("hunter2") }
        }
    }

    @Test func anUnreadableFileIsNamed() {
        #expect { _ = try CredentialsFile.load(path: "/nonexistent/credentials.json") } throws: {
            "\($0)" == "cannot read HERALD_CREDENTIALS_FILE=/nonexistent/credentials.json"
        }
    }
}
