from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "backend.accounts"
    label = "accounts"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save

        from backend.accounts.actions import token_cache
        from backend.accounts.models import ApiToken

        def forget_token(sender, instance: ApiToken, **kwargs) -> None:
            token_cache.forget(instance.digest)

        def forget_all_tokens(sender, **kwargs) -> None:
            # A user deactivated or demoted here is refused at once by this process.
            token_cache.clear()

        post_delete.connect(forget_token, sender=ApiToken, weak=False)
        post_save.connect(forget_all_tokens, sender=get_user_model(), weak=False)
