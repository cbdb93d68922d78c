import ConfigReading
public import Configuration
public import FCMCore
import Foundation

extension FCMClientConfiguration {
    /// The keys read, relative to the reader given to ``init(reading:entries:)``: under a reader
    /// scoped to `herald`, the environment names them HERALD_FCM_URL, HERALD_FCM_CA_PATH,
    /// HERALD_FCM_SERVICE_ACCOUNT_PATH and HERALD_FCM_CONNECTIONS. None of their values is secret
    /// (a path, a URL, a count): the key file's content is read from the file, never through the
    /// reader, so it is never printed.
    public static let configKeys: [ConfigKey] = [["fcm", "url"], ["fcm", "ca_path"], ["fcm", "service_account_path"], ["fcm", "connections"]]

    /// Reads FCM's settings from `config`: the base URL (`fcm.url`, ``defaultBaseURL`` when
    /// unset), the extra trust roots (`fcm.ca_path`), and the service-account key file
    /// (`fcm.service_account_path`) that serves the packages `entries` do not list, and the
    /// number of HTTP/2 connections to FCM (`fcm.connections`, 1 to 64).
    ///
    /// Returns nil when there is no FCM credential at all (no key file and no entries): an
    /// APNs-only deployment builds no FCM client. Throws ``FCMConfigurationError`` naming the
    /// key when a value is not usable; every key is checked before it is used.
    public init?(reading config: ConfigReader, entries: [FCMCredentials.Entry] = []) throws(FCMConfigurationError) {
        let fcm = config.scoped(to: "fcm")
        let url = fcm.string(forKey: "url", default: Self.defaultBaseURL)
        let caPath = fcm.string(forKey: "ca_path")
        let accountPath = fcm.string(forKey: "service_account_path")
        let connections: Int
        do {
            connections = try config.int(forKey: ["fcm", "connections"], default: Self.defaultConnections, in: 1...64)
        } catch {
            throw FCMConfigurationError(error.description)
        }
        let name: (ConfigKey) -> String = \.environmentName
        guard let parsed = URL(string: url), parsed.scheme == "https", let host = parsed.host, !host.isEmpty,
            parsed.path.isEmpty || parsed.path == "/", parsed.query == nil
        else {
            throw FCMConfigurationError("\(name(["fcm", "url"])) must be https://host[:port]")
        }
        if let caPath, !FileManager.default.isReadableFile(atPath: caPath) {
            throw FCMConfigurationError("cannot read \(name(["fcm", "ca_path"]))=\(caPath)")
        }
        let fallback = try accountPath.map { path throws(FCMConfigurationError) in
            try Self.serviceAccount(path: path, name: name(["fcm", "service_account_path"]))
        }
        guard fallback != nil || !entries.isEmpty else { return nil }
        let credentials = FCMCredentials(entries: entries, fallback: fallback)
        do {
            try credentials.validate()
        } catch {
            throw FCMConfigurationError("FCM credentials: \(error)")
        }
        self.init(baseURL: url, credentials: credentials, additionalTrustRootsPEMPath: caPath)
        self.connections = connections
        self.fallbackPath = accountPath
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
        for account in accountsByProject.values {
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
