import JSONCore

/// A Google service-account key file (JSON) for one Firebase project: what Herald needs to sign
/// its OAuth assertion and to address FCM.
///
/// ``description`` names the project and account only: the private key never appears in logs.
public struct FCMServiceAccount: Sendable, Hashable, CustomStringConvertible {
    /// `project_id`: the Firebase project, in the send URL.
    public var projectID: String
    /// `private_key_id`: the key's id, sent as the assertion's `kid`.
    public var privateKeyID: String
    /// `private_key`: the RSA private key, PEM (PKCS#8 as Google issues it).
    public var privateKeyPEM: String
    /// `client_email`: the assertion's `iss`.
    public var clientEmail: String
    /// `token_uri`: where the assertion is exchanged for an access token (and its `aud`); for
    /// ``usesMetadataServer``, the metadata server's token URL.
    public var tokenURI: String
    /// The access tokens come from the metadata server of the machine Herald runs on (GKE
    /// Workload Identity, a GCE VM's service account): no key, no assertion.
    public var usesMetadataServer = false

    /// Google's token endpoint, for a key file that names none.
    public static let defaultTokenURI = "https://oauth2.googleapis.com/token"

    public init(projectID: String, privateKeyID: String, privateKeyPEM: String, clientEmail: String, tokenURI: String = defaultTokenURI) {
        self.projectID = projectID
        self.privateKeyID = privateKeyID
        self.privateKeyPEM = privateKeyPEM
        self.clientEmail = clientEmail
        self.tokenURI = tokenURI
    }

    /// The metadata server's default service account, for `projectID`: its tokens come from
    /// `GET <metadataURL>/computeMetadata/v1/instance/service-accounts/default/token` with
    /// `Metadata-Flavor: Google`.
    public static func metadataServer(projectID: String, metadataURL: String) -> FCMServiceAccount {
        var account = FCMServiceAccount(
            projectID: projectID,
            privateKeyID: "",
            privateKeyPEM: "",
            clientEmail: "default",
            tokenURI: metadataURL + "/computeMetadata/v1/instance/service-accounts/default/token"
        )
        account.usesMetadataServer = true
        return account
    }

    /// Google's metadata server, as GKE and GCE serve it.
    public static let defaultMetadataURL = "http://metadata.google.internal"

    /// Whether `text` can be a Firebase project id.
    public static func isProjectID(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { isProjectIDByte($0) }
    }

    /// Parses a key file's JSON. `type`, when present, must be `service_account`; `token_uri`
    /// defaults to Google's. Errors name the field, never its value.
    public init(json bytes: some Collection<UInt8>) throws(FCMServiceAccountError) {
        let document: JSONValue
        do {
            document = try JSONValue(parsing: bytes)
        } catch {
            throw FCMServiceAccountError("the key file is not JSON (\(error))")
        }
        guard case .object = document else { throw FCMServiceAccountError("the key file is not a JSON object") }
        if let type = document["type"], type != .null, type.stringValue != "service_account" {
            throw FCMServiceAccountError("type must be service_account")
        }
        func field(_ name: String) throws(FCMServiceAccountError) -> String {
            guard let text = document[name]?.stringValue, !text.isEmpty else {
                throw FCMServiceAccountError("\(name) is missing or not a string")
            }
            return text
        }
        let tokenURI = document["token_uri"]?.stringValue ?? Self.defaultTokenURI
        guard tokenURI.hasPrefix("https://") else { throw FCMServiceAccountError("token_uri must be an https URL") }
        let projectID = try field("project_id")
        guard projectID.utf8.allSatisfy({ Self.isProjectIDByte($0) }) else {
            throw FCMServiceAccountError("project_id has characters a project id cannot have")
        }
        self.init(
            projectID: projectID,
            privateKeyID: try field("private_key_id"),
            privateKeyPEM: try field("private_key"),
            clientEmail: try field("client_email"),
            tokenURI: tokenURI
        )
        guard privateKeyPEM.contains("-----BEGIN") else { throw FCMServiceAccountError("private_key is not PEM") }
    }

    /// The key file's JSON, as Google writes one (for tests and the mock).
    public var json: [UInt8] {
        JSONValue.object([
            .init("type", .string("service_account")),
            .init("project_id", .string(projectID)),
            .init("private_key_id", .string(privateKeyID)),
            .init("private_key", .string(privateKeyPEM)),
            .init("client_email", .string(clientEmail)),
            .init("token_uri", .string(tokenURI)),
        ]).serialized()
    }

    public var description: String {
        usesMetadataServer
            ? "the metadata server's service account for project \(projectID)"
            : "service account \(clientEmail) of project \(projectID) (key \(privateKeyID.prefix(8))…)"
    }

    private static func isProjectIDByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: ":"), UInt8(ascii: "_"):
            true
        default: false
        }
    }
}

/// Why a service-account key file cannot be used; the detail never quotes a secret.
public struct FCMServiceAccountError: Error, Sendable, Hashable, CustomStringConvertible {
    public var detail: String

    public init(_ detail: String) {
        self.detail = detail
    }

    public var description: String { "invalid service-account key: \(detail)" }
}
