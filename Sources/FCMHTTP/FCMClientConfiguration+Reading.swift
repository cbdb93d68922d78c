import ConfigReading
public import Configuration
public import FCMCore
import Foundation

extension FCMClientConfiguration {
    /// The keys read, relative to the reader given to ``init(reading:applicationDefault:entries:)``:
    /// under a reader scoped to `herald`, the environment names them HERALD_FCM_URL,
    /// HERALD_FCM_CA_PATH, HERALD_FCM_SERVICE_ACCOUNT_PATH, HERALD_FCM_PROJECT_ID,
    /// HERALD_FCM_METADATA_URL and HERALD_FCM_CONNECTIONS. None of their values is secret (a
    /// path, a URL, an id, a count): the key file's content is read from the file, never through
    /// the reader, so it is never printed.
    public static let configKeys: [ConfigKey] = [
        ["fcm", "url"], ["fcm", "ca_path"], ["fcm", "service_account_path"], ["fcm", "project_id"], ["fcm", "metadata_url"], ["fcm", "connections"],
    ]

    /// Application Default Credentials' key file variable, read from the unscoped reader.
    public static let applicationCredentialsVariable = "GOOGLE_APPLICATION_CREDENTIALS"

    /// Reads FCM's settings from `config`: the base URL (`fcm.url`, ``defaultBaseURL`` when
    /// unset), the extra trust roots (`fcm.ca_path`), the credential that serves the packages
    /// `entries` do not list, and the number of HTTP/2 connections to FCM (`fcm.connections`,
    /// 1 to 64). That credential is, in this order: the key file `fcm.service_account_path`,
    /// the key file GOOGLE_APPLICATION_CREDENTIALS names (read from `applicationDefault`), or,
    /// with `fcm.project_id` alone, the metadata server's service account (GKE Workload
    /// Identity, a GCE VM) at `fcm.metadata_url`.
    ///
    /// Returns nil when there is no FCM credential at all: an APNs-only deployment builds no FCM
    /// client. Throws ``FCMConfigurationError`` naming the key when a value is not usable; every
    /// key is checked before it is used.
    public init?(
        reading config: ConfigReader,
        applicationDefault: ConfigReader? = nil,
        entries: [FCMCredentials.Entry] = []
    ) throws(FCMConfigurationError) {
        let fcm = config.scoped(to: "fcm")
        let url = fcm.string(forKey: "url", default: Self.defaultBaseURL)
        let caPath = fcm.string(forKey: "ca_path")
        let name: (ConfigKey) -> String = \.environmentName
        let (accountPath, accountPathName): (String?, String) =
            if let path = fcm.string(forKey: "service_account_path") {
                (path, name(["fcm", "service_account_path"]))
            } else {
                (applicationDefault?.string(forKey: ["google", "application", "credentials"]), Self.applicationCredentialsVariable)
            }
        let projectID = fcm.string(forKey: "project_id")
        let metadataURL = fcm.string(forKey: "metadata_url", default: FCMServiceAccount.defaultMetadataURL)
        let connections: Int
        do {
            connections = try config.int(forKey: ["fcm", "connections"], default: Self.defaultConnections, in: 1...64)
        } catch {
            throw FCMConfigurationError(error.description)
        }
        guard let parsed = URL(string: url), parsed.scheme == "https", let host = parsed.host, !host.isEmpty,
            parsed.path.isEmpty || parsed.path == "/", parsed.query == nil
        else {
            throw FCMConfigurationError("\(name(["fcm", "url"])) must be https://host[:port]")
        }
        if let caPath, !FileManager.default.isReadableFile(atPath: caPath) {
            throw FCMConfigurationError("cannot read \(name(["fcm", "ca_path"]))=\(caPath)")
        }
        let fallback = try Self.fallback(
            accountPath: accountPath, accountPathName: accountPathName, projectID: projectID, metadataURL: metadataURL, name: name)
        guard fallback != nil || !entries.isEmpty else { return nil }
        let credentials = FCMCredentials(entries: entries, fallback: fallback)
        do {
            try credentials.validate()
        } catch {
            throw FCMConfigurationError("FCM credentials: \(error)")
        }
        self.init(baseURL: url, credentials: credentials, additionalTrustRootsPEMPath: caPath)
        self.connections = connections
        self.fallbackPath = fallback?.usesMetadataServer == false ? accountPath : nil
    }

    /// The credential for packages no entry lists: the key file at `accountPath`, else the
    /// metadata server's account for `projectID`, else none.
    private static func fallback(
        accountPath: String?,
        accountPathName: String,
        projectID: String?,
        metadataURL: String,
        name: (ConfigKey) -> String
    ) throws(FCMConfigurationError) -> FCMServiceAccount? {
        if let projectID, !FCMServiceAccount.isProjectID(projectID) {
            throw FCMConfigurationError("\(name(["fcm", "project_id"])) is not a project id")
        }
        if let accountPath {
            let account = try serviceAccount(path: accountPath, name: accountPathName)
            if let projectID, projectID != account.projectID {
                throw FCMConfigurationError("\(name(["fcm", "project_id"])) names another project than \(accountPathName)'s key file")
            }
            return account
        }
        guard let projectID else { return nil }
        guard let parsed = URL(string: metadataURL), ["http", "https"].contains(parsed.scheme), parsed.host?.isEmpty == false,
            parsed.path.isEmpty || parsed.path == "/", parsed.query == nil
        else {
            throw FCMConfigurationError("\(name(["fcm", "metadata_url"])) must be http[s]://host[:port]")
        }
        let base = metadataURL.hasSuffix("/") ? String(metadataURL.dropLast()) : metadataURL
        return .metadataServer(projectID: projectID, metadataURL: base)
    }

    /// The service account of the key file at `path`; `name` says where the path came from in errors.
    public static func serviceAccount(path: String, name: String) throws(FCMConfigurationError) -> FCMServiceAccount {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw FCMConfigurationError("cannot read \(name)=\(path)")
        }
        do {
            let account = try FCMServiceAccount(json: data)
            try FCMCredentials(fallback: account).validate()
            return account
        } catch {
            throw FCMConfigurationError("\(name)=\(path): \(error)")
        }
    }
}

extension FCMCredentials {
    /// Checks that every account's key can sign assertions (an RSA key of 2048 bits or more).
    public func validate() throws(FCMServiceAccountError) {
        for account in accountsByProject.values where !account.usesMetadataServer {
            _ = try OAuthAssertionSigner(account: account)
        }
    }
}

/// A configuration value FCM cannot use, worded as one line naming the key.
public struct FCMConfigurationError: Error, Sendable, CustomStringConvertible {
    /// What is wrong, naming the key and never quoting key material.
    public var description: String

    /// Creates the error with its message.
    public init(_ description: String) {
        self.description = description
    }
}
