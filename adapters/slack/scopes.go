package slack

// BotScopes are the bot scopes pinplan asks for when it is installed by
// OAuth v2 (/slack/install): the manifest's oauth_config.scopes.bot
// (slack-app-manifest.yaml; TestBotScopesAreTheManifests keeps the two
// the same).
var BotScopes = []string{
	"app_mentions:read", "channels:history", "groups:history", "im:history", "mpim:history",
	"chat:write", "assistant:write", "pins:write", "reactions:write", "users:read", "files:read", "commands",
}
