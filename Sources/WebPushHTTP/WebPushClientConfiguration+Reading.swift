// WebPushClientConfiguration+Reading.swift: the web push client's settings read from Herald's
// configuration (the HERALD_WEBPUSH_* keys), each checked before it is used.

public import ConfigReading
public import Configuration
public import WebPushCore
import Foundation

extension WebPushClientConfiguration {
    /// The keys read, relative to the reader given to ``init(reading:entries:allowList:)``: under
    /// a reader scoped to `herald`, the environment names them HERALD_WEBPUSH_VAPID_KEY_PATH,
    /// HERALD_WEBPUSH_SUBJECT, HERALD_WEBPUSH_CA_PATH and HERALD_WEBPUSH_CONNECTIONS_PER_HOST.
    /// None of their values is secret (paths, a contact, a count): the key's content is read from
    /// its file, never through the reader. HERALD_WEBPUSH_ALLOWED_HOSTS is the pipeline's key
    /// (`PipelineConfiguration.webPushHosts`), read once and given as `allowList`.
    public static let configKeys: [ConfigKey] = [
        ["webpush", "vapid_key_path"], ["webpush", "subject"], ["webpush", "ca_path"], ["webpush", "connections_per_host"],
    ]

    /// Reads the web push settings from `config`: the VAPID key that signs for the apps
    /// `entries` do not list (`webpush.vapid_key_path`, a P-256 private key in PEM or its 32
    /// bytes in base64url) with its contact (`webpush.subject`, `mailto:` or `https:`, required
    /// with the key), the extra trust roots (`webpush.ca_path`) and the connections per origin
    /// (`webpush.connections_per_host`, 1 to 64); messages go only to `allowList`'s hosts.
    ///
    /// Returns nil when no VAPID key is configured at all: a deployment without web push builds
    /// no client. Throws naming the key when a value is not usable; every key is checked first.
    public init?(
        reading config: ConfigReader,
        entries: [WebPushCredentials.Entry] = [],
        allowList: WebPushHostAllowList = .standard
    ) throws(ConfigurationValueError) {
        let webpush = config.scoped(to: "webpush")
        let name: (ConfigKey) -> String = \.environmentName
        let keyPath = webpush.string(forKey: "vapid_key_path")
        let subject = webpush.string(forKey: "subject")
        let caPath = webpush.string(forKey: "ca_path")
        let connections = try config.int(forKey: ["webpush", "connections_per_host"], default: Self.defaultConnectionsPerOrigin, in: 1...64)
        if let caPath, !FileManager.default.isReadableFile(atPath: caPath) {
            throw ConfigurationValueError("cannot read \(name(["webpush", "ca_path"]))=\(caPath)")
        }
        var fallback: WebPushCredentials.Entry?
        if let keyPath {
            guard let subject else {
                throw ConfigurationValueError("\(name(["webpush", "subject"])) must be set with \(name(["webpush", "vapid_key_path"]))")
            }
            do {
                fallback = WebPushCredentials.Entry(apps: [], current: try VAPIDSigner(keyPath: keyPath, subject: subject))
            } catch VAPIDKeyError.badSubject {
                throw ConfigurationValueError("\(name(["webpush", "subject"])) must be a mailto: or https: contact")
            } catch {
                throw ConfigurationValueError("\(name(["webpush", "vapid_key_path"])): \(error)")
            }
        }
        guard fallback != nil || !entries.isEmpty else { return nil }
        self.init(credentials: WebPushCredentials(entries: entries, fallback: fallback), allowList: allowList, additionalTrustRootsPEMPath: caPath)
        connectionsPerOrigin = connections
    }
}
