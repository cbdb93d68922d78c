import Foundation
package import WebPushCore

extension CredentialsFile {
    /// The web push entries of the credentials file at `path`, each with its VAPID keys read
    /// from `vapid_key_path` and `previous_vapid_key_paths` (relative to the file); throws
    /// ``ConfigurationError`` naming the entry and the field, never key material.
    package static func webPushEntries(path: String) throws -> [WebPushCredentials.Entry] {
        let (data, directory) = try read(path)
        return try parseWebPush(data, relativeTo: directory, fileName: path)
    }

    static func parseWebPush(_ data: Data, relativeTo directory: String, fileName: String) throws -> [WebPushCredentials.Entry] {
        var listed = Set<String>()
        var entries: [WebPushCredentials.Entry] = []
        for (index, entry) in try decodeEntries(data, fileName: fileName).enumerated() where entry.platform == "webpush" {
            let place = "HERALD_CREDENTIALS_FILE=\(fileName) entry \(index + 1)"
            guard entry.topics == nil, entry.keyPath == nil, entry.certPath == nil, entry.keyID == nil, entry.teamID == nil,
                entry.certPassword == nil, entry.certKeyPath == nil, entry.packages == nil, entry.serviceAccountPath == nil
            else {
                throw ConfigurationError("\(place): a web push entry takes apps, vapid_key_path, subject and previous_vapid_key_paths only")
            }
            guard let apps = entry.apps, !apps.isEmpty else {
                throw ConfigurationError("\(place): \"apps\" must list at least one web app")
            }
            guard let keyPath = entry.vapidKeyPath, !keyPath.isEmpty, let subject = entry.subject else {
                throw ConfigurationError("\(place): give vapid_key_path (a P-256 private key) and subject (a mailto: or https: contact)")
            }
            for app in apps {
                guard (1...255).contains(app.utf8.count), !app.contains("\0") else {
                    throw ConfigurationError("\(place): the app \"\(app)\" must be 1 to 255 bytes")
                }
                guard listed.insert(app).inserted else {
                    throw ConfigurationError("\(place): the app \(app) is listed twice in the file")
                }
            }
            do {
                let current = try VAPIDSigner(keyPath: resolve(keyPath, in: directory), subject: subject)
                let previous = try (entry.previousVAPIDKeyPaths ?? []).map { path throws(VAPIDKeyError) in
                    try VAPIDSigner(keyPath: resolve(path, in: directory), subject: subject)
                }
                entries.append(WebPushCredentials.Entry(apps: apps, current: current, previous: previous))
            } catch {
                throw ConfigurationError("\(place): \(error)")
            }
        }
        return entries
    }
}
